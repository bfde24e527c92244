// oomb models: list the embedded catalog (or show one spec as JSON, or import a Hugging Face
// config.json as an oomb.model/1 file).
#include <algorithm>
#include <cstdio>

#include "cli/command.h"
#include "core/error.h"
#include "core/format.h"
#include "models/hf_config.h"
#include "models/lookup.h"
#include "models/specs.h"
#include "step/capability.h"
#include "core/files.h"

namespace oomb::cli {
namespace {

// `oomb models --import config.json --out my-model.json`: the equivalent oomb.model/1 document.
int import_model(const std::string& from, const std::string& out) {
  using namespace oomb::models;
  const std::string file = hf_config_path(from);
  check_writable(out, "--out");
  check_distinct_paths({{"--import", file}}, {{"--out", out}});
  const Json j = read_json_file(file);
  if (!is_hf_config(j))
    throw oomb::Error("--import", file, "is not a Hugging Face config.json (no architectures / model_type)",
                      "the config.json of a Hugging Face model folder, or the folder");
  const ModelSpec m = model_from_hf_config(j, file, hf_fallback_id(file));
  const std::string text = m.to_json().dump(2) + "\n";
  if (out.empty()) return std::printf("%s", text.c_str()), 0;
  write_text_file(out, text);
  std::printf("wrote %s (oomb.model/1, id %s, %s parameters%s) from %s\n", out.c_str(), m.id.c_str(),
              format_params(m.param_count()).c_str(),
              m.moe.present() ? (", " + format_params(m.active_param_count()) + " active").c_str() : "", file.c_str());
  return 0;
}

int run_models(const std::string& show, bool json) {
  using namespace oomb::models;
  if (!show.empty()) {
    if (auto id = resolve_catalog_id("llm", show); !id.empty())
      return std::printf("%s\n", load_model(id).to_json().dump(2).c_str()), 0;
    if (auto id = resolve_catalog_id("gpu", show); !id.empty())
      return std::printf("%s\n", load_gpu(id).to_json().dump(2).c_str()), 0;
    if (auto id = resolve_catalog_id("host", show); !id.empty())
      return std::printf("%s\n", load_host(id).to_json().dump(2).c_str()), 0;
    std::vector<std::string> all = model_ids(), g = gpu_ids(), h = host_ids();
    all.insert(all.end(), g.begin(), g.end());
    all.insert(all.end(), h.begin(), h.end());
    const std::vector<std::string> near = closest_ids(show, all);
    std::string hint;
    for (const auto& n : near) hint += (hint.empty() ? "did you mean " : ", ") + n;
    throw oomb::Error("--show", show, "not in the catalog",
                      (hint.empty() ? std::string() : hint + "? ") + "run `oomb models` for the list");
  }
  if (json) {
    Json j = {{"models", Json::array()}, {"gpus", Json::array()}, {"hosts", Json::array()}};
    for (const auto& id : model_ids()) {
      const ModelSpec m = load_model(id);
      Json e = m.to_json();
      // What the listing's columns show, beside the spec (not part of oomb.model/1).
      e["derived"] = {{"param_count", m.param_count()},
                      {"active_param_count", m.active_param_count()},
                      {"kv_bytes_per_token_bf16", m.kv_bytes_per_token(2)},
                      {"growing_kv_bytes_per_token_bf16", m.growing_kv_bytes_per_token(2)},
                      {"bounded_kv_bytes_bf16", m.bounded_kv_bytes(2)},
                      {"layer_kinds", m.layer_kinds_text()},
                      {"experts", m.experts_text()}};
      j["models"].push_back(e);
    }
    for (const auto& id : gpu_ids()) j["gpus"].push_back(load_gpu(id).to_json());
    for (const auto& id : host_ids()) j["hosts"].push_back(load_host(id).to_json());
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  // The attention column as wide as its longest entry (a stack of three kinds runs long).
  int kinds_width = 36;
  for (const auto& id : model_ids())
    kinds_width = std::max(kinds_width, static_cast<int>(load_model(id).layer_kinds_text().size()));
  std::printf("Models (--model)\n  %-18s %6s %7s %6s %4s %6s %8s %9s %9s %10s  %-*s %s\n", "id", "layers", "hidden",
              "heads", "kv", "hdim", "vocab", "params", "active", "KV B/token", kinds_width, "attention", "experts");
  bool any_unrun = false;
  for (const auto& id : model_ids()) {
    auto m = load_model(id);
    const bool runs = step::model_capability(m).executable();
    any_unrun = any_unrun || !runs;
    std::printf("  %-18s %6lld %7lld %6lld %4lld %6lld %8lld %9s %9s %10lld  %-*s %s%s\n", id.c_str(), (long long)m.layers,
                (long long)m.hidden, (long long)m.q_heads, (long long)m.kv_heads, (long long)m.head_dim,
                (long long)m.vocab, format_params(m.param_count()).c_str(), format_params(m.active_param_count()).c_str(),
                (long long)m.growing_kv_bytes_per_token(2), kinds_width, m.layer_kinds_text().c_str(), m.experts_text().c_str(),
                runs ? "" : "  *");
  }
  std::printf("  active: the parameters one token uses (the routed experts it is not sent to left out). KV B/token: K and V\n"
              "  of one token in bf16 over the global layers. A sliding (window) or chunked (block) layer attends at most its\n"
              "  window's tokens; over a chunk-recurrent step it keeps the window before each chunk boundary (a plan's\n"
              "  local_kv_pool, docs/model.md \"Layer kinds and experts\").\n");
  if (any_unrun)
    std::printf("  * planned and simulated, not yet run: oomb run refuses it by name (the executor computes the dense\n"
                "    families, sliding-window and chunked layers, attention sinks, and routed experts with softmax routing).\n");
  std::printf("  A mixture of experts runs on either backend in one process (no tensor or data parallelism yet); attention\n"
              "  sinks on one GPU.\n");
  std::printf("\nGPUs (--gpu)\n  %-16s %12s %12s %16s %12s %12s  %s\n", "id", "memory", "HBM", "bf16 dense", "h2d", "d2h",
              "default host");
  for (const auto& id : gpu_ids()) {
    auto g = load_gpu(id);
    std::printf("  %-16s %12s %12s %16s %12s %12s  %s\n", id.c_str(), format_bytes(g.hbm_capacity_bytes).c_str(),
                format_rate_bytes_per_s(g.hbm_bytes_per_s).c_str(), format_flops_per_s(g.bf16_flops_per_s).c_str(),
                format_rate_bytes_per_s(g.h2d_bytes_per_s).c_str(), format_rate_bytes_per_s(g.d2h_bytes_per_s).c_str(),
                g.default_host.c_str());
  }
  std::printf("\nHosts (--host)\n  %-20s %12s %12s  %s\n", "id", "RAM", "pinnable", "name");
  for (const auto& id : host_ids()) {
    auto h = load_host(id);
    std::printf("  %-20s %12s %12s  %s\n", id.c_str(), format_bytes(h.ram_bytes).c_str(),
                format_bytes(h.pinnable_bytes).c_str(), h.name.c_str());
  }
  std::printf("\nAny of --model/--gpu/--host also accepts a path to a JSON file of the same schema.\n");
  return 0;
}

const Registrar reg("models", "List the model, GPU and host catalog (or --show ID as JSON, or --import a HF config)",
                    [](CLI::App& sub) {
  auto show = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto import_from = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  sub.add_option("--show", *show, "Print one catalog entry as JSON");
  sub.add_flag("--json", *json, "Print the whole catalog as JSON");
  sub.add_option("--import", *import_from,
                 "A Hugging Face config.json (or its model folder): print or --out the equivalent oomb.model/1");
  sub.add_option("--out", *out, "With --import: write the oomb.model/1 JSON here");
  return [=] {
    if (!out->empty() && import_from->empty())
      throw oomb::Error("--out", *out, "writes an imported model", "add --import config.json");
    if (!import_from->empty()) {
      if (!show->empty() || *json) throw oomb::Error("--import", *import_from, "is not combined with --show or --json");
      return import_model(*import_from, *out);
    }
    return run_models(*show, *json);
  };
});

}  // namespace
}  // namespace oomb::cli
