#include "planner/diagnosis.h"

#include <algorithm>
#include <tuple>

#include "core/format.h"
#include "models/specs.h"
#include "step/describe.h"

namespace oomb::planner {

using step::Attention;

namespace {

Json candidate_json(const Candidate& c) {
  const auto& s = c.summary;
  return {{"config", c.config.to_json()},
          {"peak_device_bytes", s.peak_device_bytes},
          {"peak_host_bytes", s.peak_host_bytes},
          {"step_s", s.step_s},
          {"tokens_per_s", s.tokens_per_s},
          {"binding_constraint", to_string(s.binding)}};
}

}  // namespace

Json Suggestion::to_json() const {
  Json j = candidate_json(result);
  j["change"] = change;
  j["flags"] = flags;
  j["model_id"] = model_id;
  j["gpu_id"] = gpu_id;
  j["host_id"] = host_id;
  return j;
}

Json Diagnosis::to_json() const {
  Json j = {{"target", target}, {"binding_constraint", binding ? to_string(*binding) : ""}, {"violations", violations}};
  j["failures"] = Json::array();
  for (const auto& f : failures) {
    Json x = candidate_json(f.closest);
    x["label"] = f.label;
    x["binding_constraint"] = to_string(f.binding);
    x["violations"] = f.violations;
    j["failures"].push_back(x);
  }
  j["suggestions"] = Json::array();
  for (const auto& s : suggestions) j["suggestions"].push_back(s.to_json());
  return j;
}

Diagnosis diagnose(const Request& r0, int64_t N, const SearchResult& failed) {
  Diagnosis d;
  const auto& cfg = r0.scenario.config;
  const bool attention_fixed = r0.fixed.count("attention") > 0;
  // The target: exact gradients unless the user asked for (or allowed) sparse attention.
  Request r = r0;
  std::optional<step::Attention> target;
  if (attention_fixed) target = cfg.attention;
  else if (!r0.allow_sparse) target = step::Attention::dense;
  if (target) {
    r.fixed.insert("attention");
    r.scenario.config.attention = *target;
    d.target = *target == step::Attention::dense ? "dense attention (exact gradients)" : "sparse attention";
  } else {
    d.target = "dense or sparse attention";
  }
  for (const auto* c : {&failed.closest_offload, &failed.closest_on_device}) {
    if (!*c) continue;
    const auto& k = **c;
    const bool offload = c == &failed.closest_offload;
    Diagnosis::Failure f;
    if (k.config.schedule == step::Schedule::standard)
      f.label = "standard schedule";
    else if (offload)
      f.label = "with offload (" + std::to_string(k.config.resident_layers) + " resident, chunk " +
                format_tokens(k.config.chunk_tokens) + ")";
    else
      f.label = "all layers on the GPU (chunk " + format_tokens(k.config.chunk_tokens) + ")";
    f.binding = k.usage.binding();
    f.violations = k.usage.violations();
    f.closest = k;
    if (!d.binding) d.binding = f.binding;
    for (const auto& v : f.violations) d.violations.push_back(f.label + ": " + v);
    d.failures.push_back(std::move(f));
  }

  auto attempt = [&](const Request& q, int64_t n, const std::string& change, const std::string& flags) {
    // With a target, attention is fixed in q: no silent fallback to sparse.
    SearchResult s = search(q, n);
    if (!s.best) return false;
    d.suggestions.push_back({change, flags, q.scenario.model.id, q.scenario.gpu.id, q.scenario.host.id, *s.best});
    return true;
  };

  // 1. Settings the user fixed that the planner would have changed.
  if (r.fixed.count("kv_grad_dtype") && cfg.kv_grad_dtype != Dtype::bf16) {
    Request q = r;
    q.scenario.config.kv_grad_dtype = Dtype::bf16;
    attempt(q, N, "bf16 KV gradients (half the KV-gradient pages on the host and the GPU)", "--kv-grad-dtype bf16");
  }
  if (r.fixed.count("shard_optimizer") && !cfg.shard_optimizer && cfg.data_parallel > 1 && cfg.lora_rank == 0 &&
      cfg.optimizer != step::Optimizer::none) {
    Request q = r;
    q.scenario.config.shard_optimizer = true;
    attempt(q, N,
            "the AdamW state sharded over the " + std::to_string(cfg.data_parallel) +
                " data-parallel replicas (ZeRO-1: each holds 1/" + std::to_string(cfg.data_parallel) + " of it)",
            "--shard-optimizer true");
  }
  if (r.fixed.count("schedule") && cfg.schedule == step::Schedule::standard) {
    Request q = r;
    q.fixed.erase("schedule");
    q.scenario.config.schedule = step::Schedule::oomb;
    attempt(q, N, "the chunk-recurrent oomb schedule instead of standard training", "--schedule oomb");
  }
  {
    Request q = r;
    std::string dropped;
    for (const char* k : {"chunk", "page", "resident_layers", "kv_grad_dtype", "param_grad_dtype", "logits_chunk",
                          "shard_optimizer"})
      if (q.fixed.erase(k)) dropped += std::string(dropped.empty() ? "" : " ") + "--" + k;
    if (q.fixed.count("optimizer") && cfg.optimizer != step::Optimizer::none) {
      q.fixed.erase("optimizer");
      q.optimizer_auto = true;
      dropped += std::string(dropped.empty() ? "" : " ") + "--optimizer (use auto)";
    }
    std::replace(dropped.begin(), dropped.end(), '_', '-');
    if (!dropped.empty()) attempt(q, N, "let the planner choose the knobs you fixed", "drop " + dropped);
  }
  // A mixture of experts trained in full carries every expert's gradients and AdamW state: LoRA on
  // the attention keeps the experts frozen, in their stored format (MXFP4 stays MXFP4).
  if (r.scenario.model.moe.present() && cfg.lora_rank == 0 && !r.fixed.count("lora_rank")) {
    Request q = r;
    q.scenario.config.lora_rank = 16;
    q.scenario.config.lora_alpha = 32;
    q.scenario.config.lora_targets = {"q_proj", "k_proj", "v_proj", "o_proj"};
    attempt(q, N, "LoRA rank 16 on the attention, the experts frozen in their stored format",
            "--lora-rank 16 --lora-targets q_proj,k_proj,v_proj,o_proj");
  }
  // 2. Sparse attention with the largest budget that fits (approximate gradients).
  if (!failed.sparse_fallback && target != step::Attention::sparse && cfg.schedule == step::Schedule::oomb) {
    Request q = r;
    q.fixed.insert("attention");
    q.scenario.config.attention = step::Attention::sparse;
    SearchResult s = search(q, N);
    const Candidate* widest = nullptr;
    // Widest by attended tokens (a budget counts pages of its page size).
    auto span = [](const Candidate& k) { return k.config.page_budget * k.config.page_tokens; };
    for (const auto& k : s.feasible)
      if (!widest || span(k) > span(*widest) || (span(k) == span(*widest) && k.summary.step_s < widest->summary.step_s))
        widest = &k;
    if (widest)
      d.suggestions.push_back({"sparse attention, " + step::budget_text(widest->config) + " (approximate gradients)",
                               "--attention sparse --budget " + std::to_string(widest->config.page_budget) +
                                   " --page " + std::to_string(widest->config.page_tokens),
                               q.scenario.model.id, q.scenario.gpu.id, q.scenario.host.id, *widest});
  }
  // 3. A shorter context.
  {
    const MaxContext mc = max_context(r, target.value_or(step::Attention::dense), N);
    if (mc.tokens > 0 && mc.plan)
      d.suggestions.push_back({"a shorter context: at most " + std::to_string(mc.tokens) + " tokens fit",
                               "--context " + std::to_string(mc.tokens), r.scenario.model.id, r.scenario.gpu.id,
                               r.scenario.host.id, *mc.plan});
  }
  // 4. A host with more memory (smallest first). Hardware changes are tried whatever failed:
  // only the ones that make the target fit are kept.
  {
    std::vector<models::HostSpec> hosts;
    for (const auto& id : models::host_ids()) {
      auto h = models::load_host(id);
      if (h.ram_bytes > r.scenario.host.ram_bytes || h.pinnable_bytes > r.scenario.host.pinnable_bytes)
        hosts.push_back(h);
    }
    // Smallest first; among equals, the GPU's usual host.
    const std::string usual = r.scenario.gpu.default_host;
    std::sort(hosts.begin(), hosts.end(), [&](const auto& a, const auto& b) {
      return std::make_tuple(a.pinnable_bytes, a.ram_bytes, a.id != usual, a.id) <
             std::make_tuple(b.pinnable_bytes, b.ram_bytes, b.id != usual, b.id);
    });
    for (const auto& h : hosts) {
      Request q = r;
      q.scenario.host = h;
      if (attempt(q, N, "host " + h.id + " (" + format_bytes(h.ram_bytes) + " RAM, " + format_bytes(h.pinnable_bytes) +
                            " pinnable)",
                  "--host " + h.id))
        break;
    }
  }
  // 5. A GPU with more memory (smallest first), with its usual host unless the user chose one.
  {
    std::vector<models::GpuSpec> gpus;
    for (const auto& id : models::gpu_ids()) {
      auto g = models::load_gpu(id);
      if (g.kind == "gpu" && g.hbm_capacity_bytes > r.scenario.gpu.hbm_capacity_bytes) gpus.push_back(g);
    }
    std::sort(gpus.begin(), gpus.end(),
              [](const auto& a, const auto& b) { return a.hbm_capacity_bytes < b.hbm_capacity_bytes; });
    for (const auto& g : gpus) {
      Request q = r;
      q.scenario.gpu = g;
      std::string flags = "--gpu " + g.id;
      if (!r.host_explicit && !g.default_host.empty()) {
        q.scenario.host = models::load_host(g.default_host);
        flags += " (host " + g.default_host + ")";
      }
      if (attempt(q, N, "GPU " + g.id + " (" + format_bytes(g.hbm_capacity_bytes) + ")", flags)) break;
    }
  }
  // 6. Tensor parallelism over more GPUs (planning only).
  {
    const auto& m = r.scenario.model;
    for (int64_t n : {2, 4, 8}) {
      if (n <= cfg.gpus || m.kv_heads % n != 0 || m.q_heads % n != 0 || m.moe.expert_ffn_hidden % n != 0 ||
          m.moe.shared_ffn_hidden % n != 0)
        continue;
      Request q = r;
      q.scenario.config.gpus = n;
      if (attempt(q, N, std::to_string(n) + " GPUs with tensor parallelism (oomb run under mpirun: MPI on the CPU backend, NCCL on CUDA)",
                  "--gpus " + std::to_string(n)))
        break;
    }
  }
  return d;
}

}  // namespace oomb::planner
