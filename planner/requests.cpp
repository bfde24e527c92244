#include "planner/requests.h"

#include <algorithm>

#include "core/format.h"
#include "planner/search.h"

namespace oomb::planner {

std::vector<Baseline> baselines(const Request& r, int64_t context) {
  std::vector<Baseline> out;
  Request q = r;
  q.fixed.insert("schedule");
  q.fixed.insert("attention");
  q.scenario.config.schedule = step::Schedule::standard;
  q.scenario.config.attention = step::Attention::dense;
  q.executable_only = false;
  q.max_step_s = q.min_tokens_per_s = 0;
  q.objective = Objective::time;
  const SearchResult best = search(q, context);
  out.push_back({"standard, best (fused chunked loss, checkpointing searched)", best.best ? best.best : best.closest,
                 best.best.has_value()});
  q.fixed.insert("logits_chunk");
  q.fixed.insert("checkpointing");
  q.fixed.insert("kept_layers");
  q.scenario.config.logits_chunk_tokens = 0;
  q.scenario.config.checkpointing = true;
  q.scenario.config.kept_layers = 0;
  const SearchResult pub = search(q, context);
  out.push_back({"standard, published (unfused full-vocabulary logits)", pub.best ? pub.best : pub.closest,
                 pub.best.has_value()});
  return out;
}

NodeGpus node_gpus(int64_t gpus, const std::string& model) {
  NodeGpus n;
  if (gpus <= 1) return n;
  n.gpus = n.tp = gpus;
  if (n.gpus != 2 && n.gpus != 4 && n.gpus != 8) return n;  // check_request names the valid ones
  const models::ModelSpec m = models::load_model(model);
  while (n.tp > 1 && (m.kv_heads % n.tp != 0 || m.q_heads % n.tp != 0)) n.tp /= 2;
  if (n.tp != n.gpus) {
    n.note = "tensor parallelism over " + std::to_string(n.gpus) + " GPUs does not divide " + m.id + "'s heads (q " +
             std::to_string(m.q_heads) + ", kv " + std::to_string(m.kv_heads) + "): the oomb plan uses " +
             (n.tp > 1 ? "TP " + std::to_string(n.tp) : std::string("one GPU")) + " per replica, " +
             std::to_string(n.gpus / n.tp) + " data-parallel replicas on the node";
  }
  return n;
}

Comparison compare_multi_gpu(const Request& r, const NodeGpus& node, const std::optional<Candidate>& chosen,
                             int64_t context) {
  Comparison cmp;
  simulator::Scenario s = r.scenario;
  s.config.context_tokens = context;
  // oomb on one GPU (the method's claim), and as data-parallel replicas filling the node.
  Request one = r;
  one.scenario.config.gpus = 1;
  one.scenario.config.data_parallel = 1;  // the rows below place the replicas themselves
  one.scenario.config.nodes = 1;
  one.scenario.config.shard_optimizer = false;  // nothing to shard over
  one.fixed.erase("shard_optimizer");
  const SearchResult single = search(one, context);
  if (single.best) {
    simulator::Scenario s1 = one.scenario;
    s1.config = single.best->config;
    ParallelPlan p1 = data_parallel(s1, single.best->summary, 1, r.headroom);
    p1.label = "oomb, 1 GPU";
    cmp.rows.push_back(p1);
    cmp.rows.push_back(data_parallel(s1, single.best->summary, node.gpus, r.headroom));
  } else {
    cmp.notes.push_back("oomb on one GPU: no plan fits at " + format_tokens(context) + " tokens");
  }
  if (chosen && chosen->config.gpus > 1) {
    // One tensor-parallel group of the plan, its replicas on the node placed by the row.
    simulator::Scenario st = r.scenario;
    st.config = chosen->config;
    st.config.data_parallel = 1;
    st.config.nodes = 1;
    st.config.shard_optimizer = false;
    cmp.rows.push_back(data_parallel(st, simulator::evaluate(st), node.gpus / chosen->config.gpus, r.headroom));
  }
  for (auto kind : {ContextParallelism::ring, ContextParallelism::ulysses}) {
    // All the node's GPUs on one sequence; where the heads forbid that (Ulysses), the largest
    // degree that works, replicated over the rest.
    bool found = false;
    std::vector<std::string> skipped;  // why the full node does not suit, when it does not
    for (int64_t d = node.gpus; d >= 2 && !found; d /= 2) {
      std::optional<ParallelPlan> p = best_context_parallel(s, kind, d, r.headroom, d == node.gpus ? &skipped : nullptr);
      if (!p) continue;
      found = true;
      if (d < node.gpus) {
        p->replicas = node.gpus / d;
        p->gpus = node.gpus;
        p->label += " x " + std::to_string(p->replicas) + " data-parallel";
        p->notes.push_back("no layout of " + std::to_string(node.gpus) + " GPUs suits " + s.model.id +
                           (skipped.empty() ? "" : " (" + skipped.front() + ")"));
        finish_rates(*p);
      }
      cmp.rows.push_back(*p);
    }
    if (!found)
      cmp.notes.push_back(std::string(kind == ContextParallelism::ring ? "ring attention" : "Ulysses") +
                          ": no layout of 2.." + std::to_string(node.gpus) + " GPUs suits " + s.model.id);
  }
  // The recipes people run at long context (FSDP2 / ZeRO-3 with context parallelism over every GPU
  // of every node, checkpoints offloaded or not; the best FSDP layout where it is none of them), then
  // which of them and oomb's rows wins.
  const int64_t nodes = std::max<int64_t>(1, s.config.nodes);
  std::vector<std::string> skipped;
  std::vector<ParallelPlan> stock = long_context_layouts(s, node.gpus, nodes, r.headroom, &skipped);
  for (const auto& why : skipped) cmp.notes.push_back(why);
  // The row a user would otherwise run: the stock Hugging Face recipe when it fits, else the fastest
  // stock layout that does.
  const ParallelPlan* best_stock = nullptr;
  const ParallelPlan* fastest = nullptr;
  for (const auto& p : stock) {
    if (p.fits && !p.recipe.empty() && p.kind == ContextParallelism::ring && p.offload_checkpoints) best_stock = &p;
    if (p.fits && (!fastest || p.step_s < fastest->step_s)) fastest = &p;
  }
  if (!best_stock) best_stock = fastest;
  const ParallelPlan* best_oomb = nullptr;
  for (const auto& p : cmp.rows)
    if (p.fits && p.cp == 1 && p.replicas == 1 && p.gpus == node.gpus &&  // oomb's rows are the ones with cp 1
        (!best_oomb || p.step_s < best_oomb->step_s))
      best_oomb = &p;
  std::string verdict;
  if (best_stock && best_oomb && nodes == 1) {
    const double t = best_stock->step_s / best_oomb->step_s;
    const double mem = static_cast<double>(best_stock->device_bytes) / static_cast<double>(best_oomb->device_bytes);
    verdict = best_oomb->label + " against " + best_stock->label + ": " +
              (t >= 1 ? format_fixed(t, 2) + "x faster" : format_fixed(1 / t, 2) + "x slower") + ", " +
              (mem >= 1 ? format_fixed(mem, 2) + "x less device memory per GPU"
                        : format_fixed(1 / mem, 2) + "x more device memory per GPU");
  }
  for (auto& p : stock) cmp.rows.push_back(std::move(p));
  if (!verdict.empty()) cmp.notes.push_back(verdict);
  cmp.notes.push_back("context parallelism is standard full-sequence training on paper, priced with the same cost "
                      "model: Megatron-style rows shard only the AdamW state over the context-parallel ranks (fused "
                      "1K loss tiles); FSDP2 / ZeRO-3 rows shard fp32 weights, gradients and AdamW state over all "
                      "ranks and use 256-token chunked NLL (docs/model.md); interconnect " +
                      format_rate_bytes_per_s(s.gpu.interconnect_bytes_per_s) + " per direction (" + s.gpu.id +
                      " profile)" + (nodes > 1 ? ", between nodes " + format_rate_bytes_per_s(s.host.network_bytes_per_s) +
                                                     " per GPU (" + s.host.id + ")"
                                               : std::string()));
  return cmp;
}

}  // namespace oomb::planner
