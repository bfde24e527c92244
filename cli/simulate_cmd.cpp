// oomb simulate: predict memory, time and transfers of one configuration.
#include <cmath>
#include <cstdio>

#include "cli/command.h"
#include "cli/report.h"
#include "cli/scenario_flags.h"
#include "core/error.h"
#include "core/format.h"

namespace oomb::cli {
namespace {

struct SimulateArgs {
  ScenarioFlags flags;
  std::string timeline, chrome, detail = "layer";
  bool json = false;
};

int run_simulate(const SimulateArgs& a) {
  using namespace simulator;
  const Scenario s = a.flags.resolve();
  const traces::Detail detail = traces::detail_from_string(a.detail, "--detail");
  const bool want_events = !a.timeline.empty() || !a.chrome.empty();
  Summary sum;
  if (want_events) {
    EventResult r = simulate_events(s, detail);
    r.trace.metadata.command = "oomb simulate";
    if (!a.timeline.empty()) traces::write_trace(r.trace, a.timeline);
    if (!a.chrome.empty()) write_text_file(a.chrome, traces::to_chrome_trace(r.trace).dump());
    sum = r.summary;
  } else {
    sum = evaluate(s);
  }
  if (a.json) {
    std::printf("%s\n", to_json(sum).dump(2).c_str());
  } else {
    print_scenario_header(s);
    print_memory_report(s, memory_table(s), sum);
    print_time_report(s, sum);
    if (!a.timeline.empty()) std::printf("\ntimeline (oomb.trace/1, %s detail): %s\n", a.detail.c_str(), a.timeline.c_str());
    if (!a.chrome.empty()) std::printf("chrome trace (open in ui.perfetto.dev): %s\n", a.chrome.c_str());
  }
  return 0;
}

const Registrar reg("simulate", "Predict peak memory, step time and transfers of one configuration",
                    [](CLI::App& sub) {
                      auto a = std::make_shared<SimulateArgs>();
                      a->flags.add_to(sub, true);
                      sub.add_option("--timeline", a->timeline,
                                     "Write the event-level timeline (oomb.trace/1 JSON) to FILE");
                      sub.add_option("--chrome", a->chrome, "Write the timeline as a Chrome/Perfetto trace to FILE");
                      sub.add_option("--detail", a->detail, "Timeline detail: step, chunk, layer (default), op")
                          ->capture_default_str();
                      sub.add_flag("--json", a->json,
                                   "Print the simulation summary as JSON (peak_device_bytes, peak_host_bytes, step_s, "
                                   "tokens_per_s, h2d_bytes, d2h_bytes, exposed_copy_s, required_h2d_bytes_per_s, "
                                   "required_d2h_bytes_per_s, device_pool_pages, device_breakdown_bytes, feasible, "
                                   "binding_constraint, ...)");
                      sub.footer(
                          "Examples:\n"
                          "  oomb simulate --model qwen2.5-7b --gpu h200 --context 4M\n"
                          "  oomb simulate --preset oomb-published --model qwen2.5-7b --gpu h200 --context 4M "
                          "--attention sparse\n"
                          "  oomb simulate --model llama-3.1-8b --gpu h100-sxm --context 128K --schedule standard\n"
                          "  oomb simulate --model qwen2.5-7b --gpu h200 --context 1M --timeline t.json --chrome t.perfetto.json");
                      return [a] { return run_simulate(*a); };
                    });

}  // namespace
}  // namespace oomb::cli
