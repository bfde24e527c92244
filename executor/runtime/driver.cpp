#include "executor/runtime/driver.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>

#include <Eigen/Core>

#include "core/error.h"
#include "core/format.h"
#include "core/units.h"

namespace oomb::executor {

using simulator::Attention;

models::ModelSpec effective_model(const models::ModelSpec& m, const simulator::Config& c) {
  models::ModelSpec e = m;
  e.layers = simulator::effective_layers(c, m);
  return e;
}

// Device working set of one chunk (Cm = min(C, N) rows).
struct Engine::Work {
  Buffer ids, targets;               // int32 [Cm]
  Buffer x, y;                       // [Cm, H] hidden states (stage 1 ping-pong; stage 2 final)
  Buffer ckpt;                       // [L][Cm, H] layer inputs of the chunk (stage 2 checkpoints)
  Buffer h1, rstd1, q, k, v, o, lse, x2, h2, rstd2, g, u, m, tmp;  // one layer's activations
  Buffer dy, dx, dx2, dm, dg, du, dh2, dout, dq, dk, dv, dh1;       // and their gradients
  Buffer hf, rstdf, logits, dhf;     // final norm, LM head [Cm, vocab]
};

struct Engine::LayerPtrs {
  const float *ln1, *wq, *bq, *wk, *bk, *wv, *bv, *wo, *ln2, *wg, *wu, *wd;
  float *d_ln1, *d_wq, *d_bq, *d_wk, *d_bk, *d_wv, *d_bv, *d_wo, *d_ln2, *d_wg, *d_wu, *d_wd;
};

Engine::LayerPtrs Engine::layer_ptrs(int64_t l) const {
  const LayerOffsets& o = layout_.layer(l);
  const float* P = params_.f32();
  float* G = grads_.f32();
  auto p = [&](int64_t off) -> const float* { return off >= 0 ? P + off : nullptr; };
  auto d = [&](int64_t off) -> float* { return off >= 0 ? G + off : nullptr; };
  return {p(o.input_norm), p(o.q), p(o.q_bias), p(o.k), p(o.k_bias), p(o.v), p(o.v_bias), p(o.o), p(o.post_norm),
          p(o.gate), p(o.up), p(o.down),
          d(o.input_norm), d(o.q), d(o.q_bias), d(o.k), d(o.k_bias), d(o.v), d(o.v_bias), d(o.o), d(o.post_norm),
          d(o.gate), d(o.up), d(o.down)};
}

Engine::Engine(Backend& backend, const models::ModelSpec& model, const simulator::Config& config,
               const Weights& weights, EngineOptions options)
    : backend_(backend),
      model_(effective_model(model, config)),
      config_(config),
      options_(std::move(options)),
      recorder_(options_.record_trace, options_.detail) {
  simulator::validate(config, model);
  if (config.schedule != simulator::Schedule::oomb)
    throw Error("--schedule", simulator::to_string(config.schedule), "the executor runs the oomb schedule",
                "--schedule oomb (use --reference for a full-sequence run on the CPU)");
  if (config.context_tokens < 2)
    throw Error("--context", "", "needs at least 2 tokens (one next-token prediction)");
  const bool sparse = config.attention == Attention::sparse;
  if (sparse && config.selection != "published" && config.selection != "per-kv-head")
    throw Error("--selection", config.selection, "is not implemented by the executor yet", "published or per-kv-head");
  if (model_.head_dim % 2 != 0) throw Error("--model", model_.id, "head_dim must be even for RoPE");
  if (options_.measure_recall && !sparse)
    throw Error("--measure-recall", "", "measures what sparse page selections capture of the dense attention",
                "add --attention sparse");
  g_ = Geometry(config.context_tokens, config.chunk_tokens, config.page_tokens, model_.layers,
                config.resident_layers, sparse, config.page_budget,
                sparse && config.selection == "per-kv-head" ? model_.kv_heads : 1);
  // Page storage as the config says: fp32 or bf16 (anything else is refused by name).
  g_.kv_dtype = page_dtype_from_string(config.kv_dtype, "--kv-dtype");
  g_.grad_dtype = page_dtype_from_string(config.kv_grad_dtype, "--kv-grad-dtype");

  layout_ = ParamLayout(model_);
  OOMB_ASSERT(weights.layout.total() == layout_.total() && weights.layout.params().size() == layout_.params().size(),
              "weights do not have the model's layout");
  const int64_t pbytes = checked_mul(layout_.total(), 4, "parameter bytes");
  params_ = Buffer(backend_, Tier::device, pbytes, &account_, "weights");
  grads_ = Buffer(backend_, Tier::device, pbytes, &account_, "param_grads");
  backend_.upload(params_.data(), weights.data.data(), pbytes);
  if (config.optimizer != simulator::Optimizer::none) {
    const Tier t = config.optimizer == simulator::Optimizer::gpu ? Tier::device : Tier::host;
    adam_m_ = Buffer(backend_, t, pbytes, &account_, "optimizer_state");
    adam_v_ = Buffer(backend_, t, pbytes, &account_, "optimizer_state");
    decay_mask_ = Buffer(backend_, t, layout_.total(), &account_, "optimizer_state");
    std::vector<uint8_t> mask(static_cast<size_t>(layout_.total()), 0);
    for (const auto& p : layout_.params())
      if (p.decay) std::fill_n(mask.begin() + p.offset, p.numel, uint8_t{1});
    backend_.upload(decay_mask_.data(), mask.data(), layout_.total());
  }

  store_ = std::make_unique<OffloadEngine>(backend_, g_, model_.kv_dim(), account_, recorder_,
                                           options_.host_slab_bytes, options_.tagger);
  if (sparse) {
    const Tier t = config.selection_memory == simulator::SelectionMemory::device ? Tier::device : Tier::host;
    summaries_ = Buffer(backend_, t, checked_mul(checked_mul(g_.L * g_.P, model_.kv_dim(), "summaries"), 4, "summaries"),
                        &account_, "page_summaries");
  }

  const int64_t Cm = std::min(g_.C, g_.N), H = model_.hidden, qd = model_.q_dim(), kvd = model_.kv_dim();
  const int64_t F = model_.ffn_hidden, V = model_.vocab;
  w_ = std::make_unique<Work>();
  auto act = [&](int64_t floats, const char* cat = "activations") {
    return Buffer(backend_, Tier::device, checked_mul(floats, 4, "activation bytes"), &account_, cat);
  };
  w_->ids = act(Cm);
  w_->targets = act(Cm);
  w_->x = act(Cm * H);
  w_->y = act(Cm * H);
  w_->ckpt = act(checked_mul(g_.L, Cm * H, "checkpoint bytes"), "checkpoints");
  for (Buffer* b : {&w_->h1, &w_->x2, &w_->h2, &w_->tmp, &w_->dy, &w_->dx, &w_->dx2, &w_->dh2, &w_->dh1, &w_->hf,
                    &w_->dhf})
    *b = act(Cm * H);
  for (Buffer* b : {&w_->rstd1, &w_->rstd2, &w_->rstdf}) *b = act(Cm);
  for (Buffer* b : {&w_->q, &w_->o, &w_->dout, &w_->dq}) *b = act(Cm * qd);
  for (Buffer* b : {&w_->k, &w_->v, &w_->dk, &w_->dv}) *b = act(Cm * kvd);
  w_->lse = act(Cm * model_.q_heads);
  for (Buffer* b : {&w_->g, &w_->u, &w_->m, &w_->dm, &w_->dg, &w_->du}) *b = act(Cm * F);
  // The LM head and the loss run over tiles of logits_chunk_tokens rows (0: the whole chunk), so the
  // fp32 logits are [tile, vocab], never [chunk, vocab], when the config fuses the loss.
  head_rows_ = config.logits_chunk_tokens > 0 ? std::min(config.logits_chunk_tokens, Cm) : Cm;
  w_->logits = act(checked_mul(head_rows_, V, "logits"), "logits");

  if (options_.measure_recall) {
    const int64_t floats = checked_mul(checked_mul(g_.L, g_.N, "recall keys"), kvd, "recall keys");
    if (floats > (int64_t{1} << 30))
      throw Error("--measure-recall", "", "keeps a host copy of every layer's keys and computes dense scores over the "
                                          "whole prefix (" + format_bytes(checked_mul(floats, 4, "recall keys")) +
                                          " of keys here)",
                  "measure recall at a shorter --context or with fewer --layers");
    recall_keys_.assign(static_cast<size_t>(g_.L), std::vector<float>(static_cast<size_t>(g_.N * kvd), 0.0f));
  }

  dense_prefix_.resize(static_cast<size_t>(g_.n));
  for (int64_t c = 0; c < g_.n; ++c) dense_prefix_[static_cast<size_t>(c)] = dense_selection(c, 0, g_.prefix_pages(c)).union_pages;

  // Relative work per chunk for progress: tokens x (dense per-token cost in key units + keys seen).
  const double a = 2.0 * static_cast<double>(model_.params_per_layer()) / (4.0 * static_cast<double>(qd));
  for (int64_t c = 0; c < g_.n; ++c) {
    const double T = static_cast<double>(g_.chunk_len(c));
    const double prefix_keys = static_cast<double>(g_.union_bound(c) * g_.p);
    chunk_work_.push_back(T * (a + prefix_keys + T / 2));
  }
}

Engine::~Engine() = default;

template <class F>
void Engine::timed(const char* name, const Pass& pass, double flops, F&& f) {
  const TagScope tag(options_.tagger, pass.stage(), pass.chunk, pass.layer, pass_op(pass.kind), name);
  if (!recorder_.enabled()) return f();
  const int64_t t0 = steady_now_ns();
  f();
  recorder_.compute(name, pass_op(pass.kind), pass.stage(), pass.chunk, pass.layer, t0, steady_now_ns(), flops);
}

template <class F>
void Engine::timed(const char* name, const char* op, int stage, int64_t chunk, double flops, F&& f) {
  const TagScope tag(options_.tagger, stage, chunk, -1, op, name);
  if (!recorder_.enabled()) return f();
  const int64_t t0 = steady_now_ns();
  f();
  recorder_.compute(name, op, stage, chunk, -1, t0, steady_now_ns(), flops);
}

void Engine::embed(int64_t c, int stage, float* x) {
  const int64_t T = g_.chunk_len(c), s = g_.chunk_start(c);
  timed("embedding", "embedding", stage, c, 0, [&] {
    backend_.upload(w_->ids.data(), tokens_.data() + s, T * 4);
    backend_.embedding_fwd(w_->ids.i32(), T, params_.f32() + layout_.embed(), model_.hidden, x);
  });
}

PagedAttention Engine::attention_args(const Pass& pass, const PassPages& pages) const {
  PagedAttention a;
  a.rows = g_.chunk_len(pass.chunk);
  a.q_heads = model_.q_heads;
  a.kv_heads = model_.kv_heads;
  a.head_dim = model_.head_dim;
  a.page_tokens = g_.p;
  a.q = w_->q.f32();
  a.k_own = w_->k.f32();
  a.v_own = w_->v.f32();
  a.prefix_pages.assign(pages.prefix_kv.begin(), pages.prefix_kv.end());
  a.kv_dtype = g_.kv_dtype;
  a.grad_dtype = g_.grad_dtype;
  const ChunkSelection& s = log_.at(pass.chunk, pass.layer);
  if (!s.dense) {
    a.select_groups = s.groups;
    a.select.reserve(s.pages.size());
    for (const auto& list : s.pages) {
      std::vector<int32_t> slots;
      slots.reserve(list.size());
      for (int32_t page : list) {
        auto it = std::lower_bound(s.union_pages.begin(), s.union_pages.end(), static_cast<int64_t>(page));
        slots.push_back(static_cast<int32_t>(it - s.union_pages.begin()));
      }
      a.select.push_back(std::move(slots));
    }
  }
  return a;
}

namespace {
// Query-key pairs a chunk's attention computes (for the trace's FLOP counts).
double attention_pairs(const PagedAttention& a) {
  double pairs = 0;
  const int64_t U = static_cast<int64_t>(a.prefix_pages.size());
  for (int64_t j = 0, r0 = 0; r0 < a.rows; ++j, r0 += a.page_tokens) {
    const int64_t nq = std::min(a.rows - r0, a.page_tokens);
    int64_t m = U;
    if (a.select_groups > 0) m = static_cast<int64_t>(a.select[static_cast<size_t>(j * a.select_groups)].size());
    pairs += static_cast<double>(nq) * static_cast<double>(m * a.page_tokens + r0) + nq * (nq + 1) / 2.0;
  }
  return pairs;
}
}  // namespace

void Engine::select(const Pass& pass, int64_t pass_index) {
  const int64_t c = pass.chunk, l = pass.layer, prefix = g_.prefix_pages(c);
  if (!g_.sparse || prefix <= g_.budget) {
    log_.at(c, l) = dense_selection(c, l, prefix);
    return;
  }
  SelectionArgs a;
  a.q = w_->q.f32();
  a.rows = g_.chunk_len(c);
  a.q_heads = model_.q_heads;
  a.kv_heads = model_.kv_heads;
  a.head_dim = model_.head_dim;
  a.page_tokens = g_.p;
  a.summaries = summaries_.f32() + l * g_.P * model_.kv_dim();
  a.prefix_pages = prefix;
  a.budget = g_.budget;
  a.per_kv_head = config_.selection == "per-kv-head";
  const double flops = 2.0 * static_cast<double>(a.rows * prefix * model_.kv_dim());
  timed("select", pass, flops, [&] {
    log_.at(c, l) = sparse_selection(c, l, a.per_kv_head ? model_.kv_heads : 1, backend_.select_pages(a));
  });
  store_->load_prefix(pass_index);
}

// Recall of pass.chunk's selection at pass.layer (RecallSample). Needs the chunk's post-RoPE q and
// k (in the work buffers) and the keys of every earlier chunk (recall_keys_, filled here).
void Engine::measure_recall(const Pass& pass) {
  using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Strided = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
  const int64_t c = pass.chunk, l = pass.layer, T = g_.chunk_len(c), s = g_.chunk_start(c);
  const int64_t qh = model_.q_heads, kh = model_.kv_heads, hd = model_.head_dim, qd = model_.q_dim();
  const int64_t kvd = model_.kv_dim(), group = qh / kh, Sk = s + T, prefix = g_.prefix_pages(c);
  std::vector<float>& keys = recall_keys_[static_cast<size_t>(l)];
  backend_.download(keys.data() + s * kvd, w_->k.data(), T * kvd * 4);
  std::vector<float> q(static_cast<size_t>(T * qd));
  backend_.download(q.data(), w_->q.data(), T * qd * 4);

  // attended[(j * groups + g) * prefix + page]: query page j, selection group g attends `page`.
  const ChunkSelection& sel = log_.at(c, l);
  const int64_t groups = sel.dense ? 1 : sel.groups;
  std::vector<uint8_t> attended(static_cast<size_t>(g_.own_pages(c) * groups * prefix), sel.dense ? 1 : 0);
  if (!sel.dense)
    for (size_t i = 0; i < sel.pages.size(); ++i)
      for (int32_t page : sel.pages[i]) attended[i * static_cast<size_t>(prefix) + static_cast<size_t>(page)] = 1;

  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  double sum = 0;
  RowMat K, S;
  for (int64_t g = 0; g < kh; ++g) {
    K = Strided(keys.data() + g * hd, Sk, hd, Eigen::OuterStride<>(kvd));
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      S.noalias() = Strided(q.data() + h * hd, T, hd, Eigen::OuterStride<>(qd)) * K.transpose();
      for (int64_t t = 0; t < T; ++t) {
        const float* row = S.data() + t * Sk;
        const int64_t n = s + t + 1;  // causal: every earlier key and the own chunk up to t
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t key = 0; key < n; ++key) mx = std::max(mx, row[key]);
        const uint8_t* att = attended.data() + ((t / g_.p) * groups + (groups == 1 ? 0 : g)) * prefix;
        double total = 0, kept = 0;
        for (int64_t key = 0; key < n; ++key) {
          const double e = std::exp((static_cast<double>(row[key]) - mx) * scale);
          total += e;
          if (key >= s || att[key / g_.p]) kept += e;
        }
        sum += kept / total;
      }
    }
  }
  recall_.push_back({c, l, sum / static_cast<double>(T * qh)});
}

// One layer's forward over chunk `pass.chunk`. fill: also selects pages (sparse), writes the own
// K/V pages and page summaries. out == nullptr: the backward's recompute (the MLP output is not
// needed, only the activations).
void Engine::layer_forward(const Pass& pass, int64_t pass_index, PassPages& pages, const float* in, float* out) {
  const int64_t T = g_.chunk_len(pass.chunk), pos0 = g_.chunk_start(pass.chunk);
  const int64_t H = model_.hidden, qd = model_.q_dim(), kvd = model_.kv_dim(), F = model_.ffn_hidden;
  const auto eps = static_cast<float>(model_.norm_eps);
  const LayerPtrs P = layer_ptrs(pass.layer);
  Work& w = *w_;
  const double Td = static_cast<double>(T);
  timed("attn_norm", pass, 0, [&] { backend_.rmsnorm_fwd(in, P.ln1, T, H, eps, w.h1.f32(), w.rstd1.f32()); });
  timed("qkv_proj", pass, 2 * Td * H * (qd + 2 * kvd), [&] {
    backend_.linear_fwd(w.h1.f32(), T, H, P.wq, P.bq, qd, w.q.f32());
    backend_.linear_fwd(w.h1.f32(), T, H, P.wk, P.bk, kvd, w.k.f32());
    backend_.linear_fwd(w.h1.f32(), T, H, P.wv, P.bv, kvd, w.v.f32());
  });
  timed("rope", pass, 0, [&] {
    backend_.rope_fwd(w.q.f32(), T, model_.q_heads, model_.head_dim, pos0, model_.rope_theta);
    backend_.rope_fwd(w.k.f32(), T, model_.kv_heads, model_.head_dim, pos0, model_.rope_theta);
  });
  if (pass.kind == PassKind::fill) {
    select(pass, pass_index);
    if (options_.measure_recall) {
      const TagScope tag(options_.tagger, pass.stage(), pass.chunk, pass.layer, pass_op(pass.kind), "recall");
      measure_recall(pass);
    }
    if (g_.sparse)
      timed("page_summaries", pass, 0, [&] {
        backend_.page_summaries(w.k.f32(), T, kvd, g_.p,
                                summaries_.f32() + (pass.layer * g_.P + g_.first_own_page(pass.chunk)) * kvd);
      });
  }
  const PagedAttention a = attention_args(pass, pages);
  timed("attention_fwd", pass, 4.0 * model_.head_dim * model_.q_heads * attention_pairs(a),
        [&] { backend_.attention_fwd(a, w.o.f32(), w.lse.f32()); });
  if (pass.kind == PassKind::fill)
    timed("kv_write", pass, 0, [&] {
      backend_.write_kv_pages(w.k.f32(), w.v.f32(), T, kvd, g_.p, pages.own_kv, g_.kv_dtype);
    });
  timed("o_proj", pass, 2 * Td * qd * H, [&] {
    backend_.linear_fwd(w.o.f32(), T, qd, P.wo, nullptr, H, w.tmp.f32());
    backend_.copy(w.x2.f32(), in, T * H);
    backend_.add(w.x2.f32(), w.tmp.f32(), T * H);
  });
  timed("mlp_norm", pass, 0, [&] { backend_.rmsnorm_fwd(w.x2.f32(), P.ln2, T, H, eps, w.h2.f32(), w.rstd2.f32()); });
  timed("mlp_fwd", pass, 2 * Td * H * F * (out ? 3 : 2), [&] {
    backend_.linear_fwd(w.h2.f32(), T, H, P.wg, nullptr, F, w.g.f32());
    backend_.linear_fwd(w.h2.f32(), T, H, P.wu, nullptr, F, w.u.f32());
    backend_.swiglu_fwd(w.g.f32(), w.u.f32(), T * F, w.m.f32());
    if (out) {
      backend_.linear_fwd(w.m.f32(), T, F, P.wd, nullptr, H, w.tmp.f32());
      backend_.copy(out, w.x2.f32(), T * H);
      backend_.add(out, w.tmp.f32(), T * H);
    }
  });
}

void Engine::layer_backward(const Pass& pass, PassPages& pages, const float* in, const float* dy, float* dx) {
  layer_forward(pass, -1, pages, in, nullptr);  // recompute from the checkpoint
  const int64_t T = g_.chunk_len(pass.chunk), pos0 = g_.chunk_start(pass.chunk);
  const int64_t H = model_.hidden, qd = model_.q_dim(), kvd = model_.kv_dim(), F = model_.ffn_hidden;
  const LayerPtrs P = layer_ptrs(pass.layer);
  Work& w = *w_;
  const double Td = static_cast<double>(T);
  timed("mlp_bwd", pass, 4 * Td * H * F * 3, [&] {
    backend_.linear_bwd(w.m.f32(), T, F, P.wd, H, dy, w.dm.f32(), false, P.d_wd, nullptr);
    backend_.swiglu_bwd(w.g.f32(), w.u.f32(), w.dm.f32(), T * F, w.dg.f32(), w.du.f32());
    backend_.linear_bwd(w.h2.f32(), T, H, P.wg, F, w.dg.f32(), w.dh2.f32(), false, P.d_wg, nullptr);
    backend_.linear_bwd(w.h2.f32(), T, H, P.wu, F, w.du.f32(), w.dh2.f32(), true, P.d_wu, nullptr);
  });
  timed("mlp_norm_bwd", pass, 0, [&] {
    backend_.copy(w.dx2.f32(), dy, T * H);  // residual
    backend_.rmsnorm_bwd(w.x2.f32(), P.ln2, w.rstd2.f32(), w.dh2.f32(), T, H, w.dx2.f32(), P.d_ln2);
  });
  timed("o_proj_bwd", pass, 4 * Td * qd * H,
        [&] { backend_.linear_bwd(w.o.f32(), T, qd, P.wo, H, w.dx2.f32(), w.dout.f32(), false, P.d_wo, nullptr); });
  const PagedAttention a = attention_args(pass, pages);
  timed("attention_bwd", pass, 10.0 * model_.head_dim * model_.q_heads * attention_pairs(a), [&] {
    backend_.attention_bwd(a, w.o.f32(), w.lse.f32(), w.dout.f32(), w.dq.f32(), w.dk.f32(), w.dv.f32(),
                           pages.prefix_dkv);
  });
  // What later chunks accumulated into this chunk's gradient pages joins the own queries' part.
  timed("dkv_own", pass, 0,
        [&] { backend_.add_from_grad_pages(pages.own_dkv, T, kvd, g_.p, w.dk.f32(), w.dv.f32(), g_.grad_dtype); });
  timed("rope_bwd", pass, 0, [&] {
    backend_.rope_bwd(w.dq.f32(), T, model_.q_heads, model_.head_dim, pos0, model_.rope_theta);
    backend_.rope_bwd(w.dk.f32(), T, model_.kv_heads, model_.head_dim, pos0, model_.rope_theta);
  });
  timed("qkv_proj_bwd", pass, 4 * Td * H * (qd + 2 * kvd), [&] {
    backend_.linear_bwd(w.h1.f32(), T, H, P.wq, qd, w.dq.f32(), w.dh1.f32(), false, P.d_wq, P.d_bq);
    backend_.linear_bwd(w.h1.f32(), T, H, P.wk, kvd, w.dk.f32(), w.dh1.f32(), true, P.d_wk, P.d_bk);
    backend_.linear_bwd(w.h1.f32(), T, H, P.wv, kvd, w.dv.f32(), w.dh1.f32(), true, P.d_wv, P.d_bv);
  });
  timed("attn_norm_bwd", pass, 0, [&] {
    backend_.copy(dx, w.dx2.f32(), T * H);
    backend_.rmsnorm_bwd(in, P.ln1, w.rstd1.f32(), w.dh1.f32(), T, H, dx, P.d_ln1);
  });
}

double Engine::head_forward_backward(int64_t c, const float* x_last, float* dy) {
  const int64_t T = g_.chunk_len(c), s = g_.chunk_start(c), H = model_.hidden, V = model_.vocab;
  Work& w = *w_;
  std::vector<int32_t> targets(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t)
    targets[static_cast<size_t>(t)] = s + t + 1 < g_.N ? tokens_[static_cast<size_t>(s + t + 1)] : -1;
  double loss_sum = 0;
  const float inv = 1.0f / static_cast<float>(g_.N - 1);
  timed("lm_head", "lm_head", 2, c, 6.0 * T * H * V, [&] {
    backend_.upload(w.targets.data(), targets.data(), T * 4);
    backend_.rmsnorm_fwd(x_last, params_.f32() + layout_.final_norm(), T, H, static_cast<float>(model_.norm_eps),
                         w.hf.f32(), w.rstdf.f32());
    // Row tiles: logits of a tile, the loss and its gradient in place, then the tile's share of dW
    // (accumulated) and of d(final norm output) (its own rows).
    for (int64_t r0 = 0; r0 < T; r0 += head_rows_) {
      const int64_t rows = std::min(head_rows_, T - r0);
      const float* hf = w.hf.f32() + r0 * H;
      backend_.linear_fwd(hf, rows, H, params_.f32() + layout_.lm_head(), nullptr, V, w.logits.f32());
      loss_sum += backend_.cross_entropy(w.logits.f32(), rows, V, w.targets.i32() + r0, inv);
      backend_.linear_bwd(hf, rows, H, params_.f32() + layout_.lm_head(), V, w.logits.f32(), w.dhf.f32() + r0 * H,
                          false, grads_.f32() + layout_.lm_head(), nullptr);
    }
    backend_.fill_zero(dy, T * H * 4);
    backend_.rmsnorm_bwd(x_last, params_.f32() + layout_.final_norm(), w.rstdf.f32(), w.dhf.f32(), T, H, dy,
                         grads_.f32() + layout_.final_norm());
  });
  return loss_sum / static_cast<double>(g_.N - 1);
}

void Engine::report(const Pass& pass) {
  const double units = pass.kind == PassKind::fill ? 1.0 : pass.kind == PassKind::recompute ? 1.0 : 3.5;
  work_done_ += units * chunk_work_[static_cast<size_t>(pass.chunk)] / static_cast<double>(g_.L);
  if (!options_.progress) return;
  Progress p;
  p.stage = pass.stage();
  p.chunk = pass.chunk;
  p.chunks = g_.n;
  p.fraction = std::min(1.0, work_done_ / work_total_);
  p.elapsed_s = static_cast<double>(steady_now_ns() - step_start_ns_) * 1e-9;
  p.eta_s = p.fraction > 0 ? p.elapsed_s * (1 - p.fraction) / p.fraction : 0;
  p.tokens_per_s = p.elapsed_s > 0 ? p.fraction * static_cast<double>(g_.N) / p.elapsed_s : 0;
  p.device_bytes = account_.in_use(Tier::device);
  options_.progress(p);
}

StepResult Engine::step(const std::vector<int32_t>& tokens) {
  if (static_cast<int64_t>(tokens.size()) != g_.N)
    throw Error("tokens", "", "got " + std::to_string(tokens.size()) + " tokens for a context of " +
                                  std::to_string(g_.N));
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= model_.vocab)
      throw Error("tokens", "", "token " + std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                                    " is out of range", "ids must be < vocab " + std::to_string(model_.vocab));
  tokens_ = tokens;
  step_start_ns_ = steady_now_ns();
  work_done_ = 0;
  work_total_ = 0;
  for (double wk : chunk_work_) work_total_ += 5.5 * wk;
  log_.reset(g_.n, g_.L);
  recall_.clear();
  store_->begin_step([this](const Pass& p) -> const std::vector<int64_t>* {
    if (p.kind == PassKind::fill && (!g_.sparse || g_.prefix_pages(p.chunk) <= g_.budget))
      return &dense_prefix_[static_cast<size_t>(p.chunk)];
    if (!log_.recorded(p.chunk, p.layer)) return nullptr;
    return &log_.at(p.chunk, p.layer).union_pages;
  });
  const auto& passes = store_->passes();
  const int64_t H = model_.hidden, Cm = std::min(g_.C, g_.N);
  Work& w = *w_;
  size_t pi = 0;
  auto next = [&](PassKind kind, int64_t c, int64_t l) -> const Pass& {
    const Pass& p = passes[pi];
    OOMB_ASSERT(p.kind == kind && p.chunk == c && p.layer == l, "pass order");
    return p;
  };
  // A pass's page work (slot allocation, gradient pages zeroed, copy-in waits; write-back and
  // release), tagged with the pass (its copies carry their own pass's tag, see offload.cpp).
  auto acquire = [&](const Pass& p) -> PassPages& {
    const TagScope tag(options_.tagger, p.stage(), p.chunk, p.layer, pass_op(p.kind), "pages");
    return store_->acquire(static_cast<int64_t>(pi));
  };
  auto release = [&](const Pass& p) {
    const TagScope tag(options_.tagger, p.stage(), p.chunk, p.layer, pass_op(p.kind), "pages");
    store_->release(static_cast<int64_t>(pi));
  };

  // Stage 1: forward fill, chunks in order, no gradients.
  for (int64_t c = 0; c < g_.n; ++c) {
    float* x = w.x.f32();
    float* y = w.y.f32();
    embed(c, 1, x);
    for (int64_t l = 0; l < g_.L; ++l, ++pi) {
      const Pass& p = next(PassKind::fill, c, l);
      PassPages& pages = acquire(p);
      layer_forward(p, static_cast<int64_t>(pi), pages, x, y);
      release(p);
      std::swap(x, y);
      report(p);
    }
  }

  // Stage 2: chunks in reverse; recompute keeping each layer's input, then backward layer by layer.
  double loss = 0;
  for (int64_t c = g_.n - 1; c >= 0; --c) {
    auto ckpt = [&](int64_t l) { return w.ckpt.f32() + l * Cm * H; };
    embed(c, 2, ckpt(0));
    for (int64_t l = 0; l < g_.L; ++l, ++pi) {
      const Pass& p = next(PassKind::recompute, c, l);
      PassPages& pages = acquire(p);
      layer_forward(p, static_cast<int64_t>(pi), pages, ckpt(l), l + 1 < g_.L ? ckpt(l + 1) : w.x.f32());
      release(p);
      report(p);
    }
    float* dy = w.dy.f32();
    float* dx = w.dx.f32();
    loss += head_forward_backward(c, w.x.f32(), dy);
    for (int64_t l = g_.L - 1; l >= 0; --l, ++pi) {
      const Pass& p = next(PassKind::backward, c, l);
      PassPages& pages = acquire(p);
      layer_backward(p, pages, ckpt(l), dy, dx);
      release(p);
      std::swap(dy, dx);
      report(p);
    }
    timed("embedding_bwd", "embedding_bwd", 2, c, 0, [&] {
      backend_.embedding_bwd(w.ids.i32(), g_.chunk_len(c), dy, H, grads_.f32() + layout_.embed());
    });
  }
  OOMB_ASSERT(pi == passes.size());

  // A non-finite loss poisons the gradients and, through the optimizer, every later step: stop.
  if (!std::isfinite(loss))
    throw Error("run", "loss", std::string("is ") + (std::isnan(loss) ? "NaN" : "infinite") + " at step " +
                                   std::to_string(steps_ + 1) + ": the run diverged; nothing more is computed or written",
                "finite --weights, a smaller --init-std, or a lower --lr");
  if (config_.optimizer != simulator::Optimizer::none && ++accumulated_ >= options_.adamw.grad_accum)
    optimizer_step();

  StepResult r;
  r.loss = loss;
  r.seconds = static_cast<double>(steady_now_ns() - step_start_ns_) * 1e-9;
  ++steps_;
  total_s_ += r.seconds;
  Measured& m = measured_;
  m.kv_dtype = to_string(g_.kv_dtype);
  m.kv_grad_dtype = to_string(g_.grad_dtype);
  m.kv_page_bytes = store_->kv_page_bytes();
  m.grad_page_bytes = store_->grad_page_bytes();
  m.kv_pool_pages = store_->kv_pool().capacity();
  m.grad_pool_pages = store_->grad_pool().capacity();
  m.kv_pool_high_water_pages = store_->kv_pool().high_water();
  m.grad_pool_high_water_pages = store_->grad_pool().high_water();
  m.host_kv_pages = store_->host_kv_pool() ? store_->host_kv_pool()->capacity() : 0;
  m.host_grad_pages = store_->host_grad_pool() ? store_->host_grad_pool()->capacity() : 0;
  m.peak_device_bytes = account_.peak(Tier::device);
  m.peak_host_bytes = account_.peak(Tier::host);
  m.device_breakdown_bytes = account_.peak_by_category(Tier::device);
  m.h2d_bytes = store_->counters().h2d_bytes;
  m.d2h_bytes = store_->counters().d2h_bytes;
  m.union_pages.clear();
  for (int64_t c = 0; c < g_.n; ++c)
    for (int64_t l = 0; l < g_.L; ++l)
      m.union_pages.push_back({c, l, static_cast<int64_t>(log_.at(c, l).union_pages.size())});
  m.recall = recall_;
  m.steps = steps_;
  m.step_s = total_s_ / static_cast<double>(steps_);
  m.tokens_per_s = total_s_ > 0 ? static_cast<double>(g_.N * steps_) / total_s_ : 0;
  m.loss = loss;
  return r;
}

void Engine::optimizer_step() {
  const AdamWOptions& o = options_.adamw;
  const int64_t n = layout_.total();
  timed("adamw", "optimizer", 2, -1, 12.0 * static_cast<double>(n), [&] {
    if (accumulated_ > 1) backend_.scale(grads_.f32(), n, 1.0f / static_cast<float>(accumulated_));
    backend_.adamw(params_.f32(), grads_.f32(), adam_m_.f32(), adam_v_.f32(),
                   static_cast<const uint8_t*>(decay_mask_.data()), n, o.lr, o.beta1, o.beta2, o.eps, o.weight_decay,
                   ++adam_steps_);
  });
  {
    const TagScope tag(options_.tagger, 2, -1, -1, "optimizer", "zero_gradients");
    zero_gradients();
  }
  accumulated_ = 0;
}

void Engine::zero_gradients() { backend_.fill_zero(grads_.data(), grads_.bytes()); }

Gradients Engine::gradients() const {
  Gradients g = zero_params(model_);
  backend_.download(g.data.data(), grads_.data(), grads_.bytes());
  return g;
}

Weights Engine::weights() const {
  Weights w = zero_params(model_);
  backend_.download(w.data.data(), params_.data(), params_.bytes());
  return w;
}

traces::Trace Engine::trace(const std::string& command) const {
  traces::Metadata md;
  // Compute times are host wall-clock around each op: true times on the cpu backend; on the cuda
  // backend they are enqueue times until a CUPTI collector supplies device times ("cuda-cupti").
  md.source = backend_.name() == "cuda" ? "cuda" : "cpu";
  md.device = backend_.name() == "cuda" ? "cuda (fp32 interface, host-timed)" : backend_.name() + " (fp32 reference backend)";
  md.command = command;
  char buf[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  md.time = buf;
  md.extra = {{"model", model_.id}, {"layers", model_.layers}, {"config", config_.to_json()},
              {"measured", measured_.to_json()}};
  return recorder_.finish(std::move(md));
}

traces::Trace Engine::device_timed_trace(traces::Trace device, const std::string& command) const {
  OOMB_ASSERT(recorder_.enabled(), "device_timed_trace needs EngineOptions::record_trace");
  traces::Trace host = trace(command);
  traces::Trace t = std::move(device);
  const std::string source = t.metadata.source, name = t.metadata.device;
  const int64_t dropped = t.metadata.dropped_records;
  const Json device_extra = t.metadata.extra;
  const traces::Detail detail = t.metadata.detail;
  t.metadata = std::move(host.metadata);
  t.metadata.source = source;
  if (!name.empty()) t.metadata.device = name;
  t.metadata.dropped_records = dropped;
  t.metadata.detail = detail;
  if (device_extra.is_object())
    for (const auto& [k, v] : device_extra.items()) t.metadata.extra[k] = v;
  t.memory = std::move(host.memory);
  t.summary = traces::summarize(t);
  return t;
}

Json Measured::to_json() const {
  Json unions = Json::array();
  int64_t max_union = 0;
  for (const auto& u : union_pages) {
    unions.push_back({{"chunk", u.chunk}, {"layer", u.layer}, {"pages", u.pages}});
    max_union = std::max(max_union, u.pages);
  }
  Json j = {{"compute_dtype", "fp32"},
          {"kv_dtype", kv_dtype},
          {"kv_grad_dtype", kv_grad_dtype},
          {"kv_page_bytes", kv_page_bytes},
          {"grad_page_bytes", grad_page_bytes},
          {"kv_pool_pages", kv_pool_pages},
          {"grad_pool_pages", grad_pool_pages},
          {"kv_pool_high_water_pages", kv_pool_high_water_pages},
          {"grad_pool_high_water_pages", grad_pool_high_water_pages},
          {"device_pool_pages", kv_pool_high_water_pages + grad_pool_high_water_pages},
          {"host_kv_pages", host_kv_pages},
          {"host_grad_pages", host_grad_pages},
          {"peak_device_bytes", peak_device_bytes},
          {"peak_host_bytes", peak_host_bytes},
          {"device_breakdown_bytes", device_breakdown_bytes},
          {"h2d_bytes", h2d_bytes},
          {"d2h_bytes", d2h_bytes},
          {"max_union_pages", max_union},
          {"union_pages", unions},
          {"step_s", step_s},
          {"tokens_per_s", tokens_per_s},
          {"loss", loss},
          {"steps", steps}};
  if (!recall.empty()) {
    Json r = Json::array();
    for (const auto& x : recall) r.push_back({{"chunk", x.chunk}, {"layer", x.layer}, {"recall", x.recall}});
    j["recall"] = r;
    j["mean_recall"] = mean_recall();
    j["min_recall"] = min_recall();
  }
  return j;
}

double Measured::mean_recall() const {
  double s = 0;
  for (const auto& x : recall) s += x.recall;
  return recall.empty() ? 0.0 : s / static_cast<double>(recall.size());
}

double Measured::min_recall() const {
  double m = recall.empty() ? 0.0 : 1.0;
  for (const auto& x : recall) m = std::min(m, x.recall);
  return m;
}

Json DenseComparison::to_json() const {
  return {{"loss", loss}, {"dense_loss", dense_loss}, {"loss_diff", loss_diff},
          {"max_grad_rel_error", max_grad_rel_error}, {"worst_tensor", worst_tensor}};
}

DenseComparison compare_with_dense(Backend& backend, const models::ModelSpec& model, const simulator::Config& config,
                                   const Weights& weights, const std::vector<int32_t>& tokens, double loss,
                                   const Gradients& grads) {
  simulator::Config c = config;
  c.attention = Attention::dense;
  c.optimizer = simulator::Optimizer::none;
  Engine dense(backend, model, c, weights);
  DenseComparison r;
  r.loss = loss;
  r.dense_loss = dense.step(tokens).loss;
  r.loss_diff = loss - r.dense_loss;
  const Gradients d = dense.gradients();
  const WorstTensor worst = worst_relative_l2(grads, d);
  r.max_grad_rel_error = worst.rel_l2;
  r.worst_tensor = worst.name;
  return r;
}

}  // namespace oomb::executor
