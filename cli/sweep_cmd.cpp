// oomb sweep: one row per context for oomb dense, oomb sparse and standard training.
#include <cstdio>

#include "cli/command.h"
#include "cli/scenario_flags.h"
#include "core/error.h"
#include "core/format.h"
#include "core/units.h"

namespace oomb::cli {
namespace {

struct SweepArgs {
  ScenarioFlags flags;
  std::string contexts = "8K..4M";
  bool csv = false, json = false;
};

int run_sweep(const SweepArgs& a) {
  using namespace simulator;
  const std::vector<int64_t> contexts = parse_token_list(a.contexts, "--contexts");
  Scenario base = a.flags.resolve();
  // Every row is checked before the first is printed: a bad range fails whole, naming --contexts.
  for (int64_t n : contexts) {
    Config c = base.config;
    c.context_tokens = n;
    try {
      validate(c, base.model);
    } catch (const Error& e) {
      if (e.where() != "--context") throw;
      throw Error("--contexts", a.contexts, "context " + std::to_string(n) + " " + e.problem(), e.hint());
    }
  }
  struct Variant {
    const char* name;
    Schedule schedule;
    Attention attention;
  };
  const Variant variants[] = {{"oomb-dense", Schedule::oomb, Attention::dense},
                              {"oomb-sparse", Schedule::oomb, Attention::sparse},
                              {"standard", Schedule::standard, Attention::dense}};
  Json rows = Json::array();
  if (a.csv)
    std::printf("context_tokens,variant,peak_device_bytes,peak_host_bytes,step_s,tokens_per_s,exposed_copy_s,feasible,"
                "binding_constraint\n");
  else if (!a.json)
    std::printf("%s on %s (host %s)\n%9s | %-33s | %-33s | %-33s\n", base.model.id.c_str(), base.gpu.id.c_str(),
                base.host.id.c_str(), "context", "oomb dense: device / step", "oomb sparse: device / step",
                "standard: device / step");
  for (int64_t n : contexts) {
    if (!a.csv && !a.json) std::printf("%9s", format_tokens(n).c_str());
    for (const auto& v : variants) {
      Scenario s = base;
      s.config.context_tokens = n;
      s.config.schedule = v.schedule;
      s.config.attention = v.attention;
      Summary sum = evaluate(s);
      if (a.csv) {
        std::printf("%lld,%s,%lld,%lld,%.6g,%.6g,%.6g,%s,%s\n", static_cast<long long>(n), v.name,
                    static_cast<long long>(sum.peak_device_bytes), static_cast<long long>(sum.peak_host_bytes), sum.step_s,
                    sum.tokens_per_s, sum.exposed_copy_s, sum.feasible ? "true" : "false", sum.binding_constraint.c_str());
      } else if (a.json) {
        Json j = to_json(sum);
        j["context_tokens"] = n;
        j["variant"] = v.name;
        rows.push_back(j);
      } else {
        char cell[64];
        std::snprintf(cell, sizeof cell, "%10s %10s %s", format_bytes(sum.peak_device_bytes).c_str(),
                      format_duration_s(sum.step_s).c_str(), sum.feasible ? "fits" : "OOM ");
        if (!sum.feasible && sum.binding_constraint != "device memory")
          std::snprintf(cell, sizeof cell, "%10s %10s %s", format_bytes(sum.peak_device_bytes).c_str(),
                        format_duration_s(sum.step_s).c_str(), "host!");
        std::printf(" | %-33s", cell);
      }
    }
    if (!a.csv && !a.json) std::printf("\n");
  }
  if (a.json) std::printf("%s\n", rows.dump(2).c_str());
  if (!a.csv && !a.json)
    std::printf("fits = within device and host limits; OOM = device memory exceeded; host! = host memory exceeded\n");
  return 0;
}

const Registrar reg("sweep", "Memory and step time versus context for oomb dense, oomb sparse and standard training",
                    [](CLI::App& sub) {
                      auto a = std::make_shared<SweepArgs>();
                      a->flags.add_to(sub, false);
                      sub.add_option("--contexts", a->contexts,
                                     "Contexts: LOW..HIGH (doubling, e.g. 8K..4M) or a list (8K,100000,1M)")
                          ->capture_default_str();
                      sub.add_flag("--csv", a->csv, "CSV output");
                      sub.add_flag("--json", a->json, "JSON output (one simulation summary per row)");
                      sub.footer("Example: oomb sweep --model qwen2.5-7b --gpu h200 --contexts 8K..4M");
                      return [a] { return run_sweep(*a); };
                    });

}  // namespace
}  // namespace oomb::cli
