#include "executor/runtime/backend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <limits>

#include "core/error.h"
#include "executor/runtime/memory_account.h"

namespace oomb::executor {

void extent_fail(const char* op, const char* what, int64_t n, int64_t held) {
  throw ExtentError(std::string("oomb: internal error: ") + op + " would touch " + std::to_string(n) + " elements of " +
                    what + ", whose buffer holds " + std::to_string(held));
}
const char* to_string(CopyDir d) { return d == CopyDir::h2d ? "h2d" : "d2h"; }

int64_t page_dtype_bytes(PageDtype d) { return d == PageDtype::bf16 ? 2 : 4; }
const char* to_string(PageDtype d) { return d == PageDtype::bf16 ? "bf16" : "fp32"; }

PageDtype page_dtype_of(Dtype d, const std::string& flag) {
  if (d == Dtype::fp32) return PageDtype::f32;
  if (d == Dtype::bf16) return PageDtype::bf16;
  const std::string name = to_string(d);
  throw Error(flag, name, "the executor stores KV and KV-gradient pages as fp32 or bf16 only (" + name +
                              " pages are modelled by simulate and plan, not executed)",
              "fp32 or bf16");
}

DType storage_dtype_of(Dtype d, const std::string& flag) {
  if (d == Dtype::fp32) return DType::f32;
  if (d == Dtype::bf16) return DType::bf16;
  throw Error(flag, to_string(d), "the executor stores weights, gradients, activations and loss tiles as fp32 or bf16 only",
              "fp32 or bf16");
}

namespace extents {

void embedding(const char* op, int64_t rows, int64_t hidden, ConstTensor rows_view) {
  check_extent(op, "the rows", rows_view, rows * hidden);
}

void rmsnorm(const char* op, ConstTensor x, ConstTensor w, int64_t rows, int64_t dim, ConstTensor y) {
  check_extent(op, "x", x, rows * dim);
  check_extent(op, "the weight", w, dim);
  check_extent(op, "the output", y, rows * dim);
}

void linear_fwd(ConstTensor x, int64_t rows, int64_t in, ConstTensor w, ConstTensor b, int64_t out, ConstTensor y) {
  check_extent("linear_fwd", "x", x, rows * in);
  check_extent("linear_fwd", "W", w, out * in);
  check_extent("linear_fwd", "b", b, out);
  check_extent("linear_fwd", "y", y, rows * out);
}

void linear_bwd(ConstTensor x, int64_t rows, int64_t in, ConstTensor w, int64_t out, ConstTensor dy, ConstTensor dx,
                ConstTensor dw, ConstTensor db) {
  check_extent("linear_bwd", "x", x, rows * in);
  check_extent("linear_bwd", "W", w, out * in);
  check_extent("linear_bwd", "dy", dy, rows * out);
  check_extent("linear_bwd", "dx", dx, rows * in);
  check_extent("linear_bwd", "dW", dw, out * in);
  check_extent("linear_bwd", "db", db, out);
}

void lora(const char* op, ConstTensor x, int64_t rows, int64_t in, ConstTensor a, ConstTensor b, int64_t rank,
          int64_t out, ConstTensor u, ConstTensor y) {
  check_extent(op, "x", x, rows * in);
  check_extent(op, "A", a, rank * in);
  check_extent(op, "B", b, out * rank);
  check_extent(op, "u", u, rows * rank);
  check_extent(op, "the output rows", y, rows * out);
}

void elementwise(const char* op, int64_t n, std::initializer_list<ConstTensor> views) {
  for (const ConstTensor& v : views) check_extent(op, "an operand", v, n);
}

const float* fp32_operand(const char* op, ConstTensor t, int64_t n) {
  OOMB_ASSERT(t.dtype == DType::f32, std::string(op) + ": fp32 operands only");
  check_extent(op, "an operand", t, n);
  return static_cast<const float*>(t.data);
}
float* fp32_operand(const char* op, Tensor t, int64_t n) {
  return const_cast<float*>(fp32_operand(op, ConstTensor(t), n));
}

void attention(const char* op, const PagedAttention& a, std::initializer_list<ConstTensor> q_rows,
               std::initializer_list<ConstTensor> kv_rows) {
  for (const ConstTensor& v : q_rows) check_extent(op, "a query-row operand", v, a.rows * a.q_heads * a.head_dim);
  for (const ConstTensor& v : kv_rows) check_extent(op, "a key-row operand", v, a.rows * a.kv_heads * a.head_dim);
}

void cross_entropy(ConstTensor logits, int64_t rows, int64_t vocab, ConstTensor grad) {
  check_extent("cross_entropy", "the logits", logits, rows * vocab);
  check_extent("cross_entropy", "the gradient", grad, rows * vocab);
}

}  // namespace extents

void Backend::cross_entropy_acc(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets, float scale,
                                Tensor grad, int64_t slot) {
  OOMB_ASSERT(slot >= 0);
  if (static_cast<int64_t>(loss_slots_.size()) <= slot) loss_slots_.resize(static_cast<size_t>(slot) + 1, 0.0);
  loss_slots_[static_cast<size_t>(slot)] += cross_entropy(logits, rows, vocab, targets, scale, grad);
}

void Backend::cross_entropy_shard_stats(ConstTensor, int64_t, int64_t, const int32_t*, float*) {
  throw Error("--gpus", "", "tensor parallelism needs a vocabulary-parallel loss, which the " + name() +
                                " backend does not have",
              "--backend cpu or cuda under mpirun, or --gpus 1");
}
void Backend::cross_entropy_shard_grad(ConstTensor, int64_t, int64_t, const int32_t*, const float*, float, Tensor) {
  cross_entropy_shard_stats(ConstTensor{}, 0, 0, nullptr, nullptr);
}

void Backend::cross_entropy_shard_combine(float* stats, int64_t ranks, int64_t rows, const int32_t* targets,
                                          int64_t slot) {
  OOMB_ASSERT(slot >= 0 && ranks >= 1 && rows >= 0);
  const int64_t n = ranks * rows * 3;
  std::vector<float> st(static_cast<size_t>(n));
  std::vector<int32_t> tg(static_cast<size_t>(rows));
  download(st.data(), stats, n * 4);
  download(tg.data(), targets, rows * 4);
  std::vector<float> max_sum(static_cast<size_t>(rows * 2), 0.0f);
  double loss = 0;
  for (int64_t r = 0; r < rows; ++r) {
    max_sum[static_cast<size_t>(r * 2 + 1)] = 1;
    if (tg[static_cast<size_t>(r)] == -1) continue;  // no next token
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < ranks; ++k) mx = std::max(mx, st[static_cast<size_t>((k * rows + r) * 3)]);
    double sum = 0, target = 0;
    for (int64_t k = 0; k < ranks; ++k) {
      const float* e = st.data() + (k * rows + r) * 3;
      sum += static_cast<double>(e[1]) * std::exp(static_cast<double>(e[0]) - static_cast<double>(mx));
      target += static_cast<double>(e[2]);
    }
    max_sum[static_cast<size_t>(r * 2)] = mx;
    max_sum[static_cast<size_t>(r * 2 + 1)] = static_cast<float>(sum);
    loss += std::log(sum) - (target - static_cast<double>(mx));
  }
  upload(stats, max_sum.data(), rows * 2 * 4);
  if (static_cast<int64_t>(loss_slots_.size()) <= slot) loss_slots_.resize(static_cast<size_t>(slot) + 1, 0.0);
  loss_slots_[static_cast<size_t>(slot)] += loss;
}

std::vector<double> Backend::take_losses(int64_t n) {
  OOMB_ASSERT(n >= 0);
  std::vector<double> out(static_cast<size_t>(n), 0.0);
  for (size_t i = 0; i < out.size() && i < loss_slots_.size(); ++i) out[i] = loss_slots_[i];
  loss_slots_.clear();
  return out;
}

void Event::signal() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
}

void Event::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return done_; });
}

bool Event::done() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

Buffer::Buffer(Backend& b, Tier tier, int64_t bytes, MemoryAccount* account, std::string row, DType dtype)
    : backend_(&b), bytes_(bytes), tier_(tier), dtype_(dtype), account_(account), row_(std::move(row)) {
  // Accounted first: an allocation the table does not hold is refused before it is made.
  if (account_) account_->add(tier_, row_, bytes_);
  try {
    ptr_ = bytes <= 0 ? nullptr : row_.empty() ? b.allocate(tier, bytes) : b.allocate_row(tier, bytes, row_);
  } catch (...) {
    if (account_) account_->add(tier_, row_, -bytes_);
    throw;
  }
}

Buffer::~Buffer() { reset(); }

void Buffer::reset() {
  // Runs in destructors and noexcept moves: after a device fault deallocate can throw, and letting
  // it escape would terminate the program before it writes what it measured. Logged instead.
  if (backend_ && ptr_) {
    try {
      backend_->deallocate(tier_, ptr_, bytes_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "oomb: freeing %lld bytes of %s memory (%s) failed: %s\n", static_cast<long long>(bytes_),
                   to_string(tier_), row_.empty() ? "no row" : row_.c_str(), e.what());
    }
  }
  if (account_) account_->add(tier_, row_, -bytes_);
  backend_ = nullptr;
  ptr_ = nullptr;
  bytes_ = 0;
  account_ = nullptr;
}

Buffer::Buffer(Buffer&& o) noexcept { *this = std::move(o); }

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    backend_ = o.backend_;
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    tier_ = o.tier_;
    dtype_ = o.dtype_;
    account_ = o.account_;
    row_ = std::move(o.row_);
    o.backend_ = nullptr;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
    o.account_ = nullptr;
  }
  return *this;
}

void MemoryAccount::bind(const std::vector<step::BufferRow>& rows) {
  std::lock_guard<std::mutex> lock(mu_);
  OOMB_ASSERT(used_[0] == 0 && used_[1] == 0, "a memory account is bound before anything is allocated");
  bound_ = true;
  all_phases_ = 0;
  for (auto& r : rows_) r.clear();
  for (const step::BufferRow& r : rows) {
    Row& row = rows_[static_cast<int>(r.tier)][r.name];
    row.category = r.category;
    row.capacity = r.bytes;
    row.phases = r.phases;
    all_phases_ |= r.phases;
  }
}

namespace {
std::string phases_text(step::PhaseMask m) {
  std::string s;
  for (const std::string& n : step::phase_names(m)) s += (s.empty() ? "" : ", ") + n;
  return s;
}
}  // namespace

void MemoryAccount::add(Tier tier, const std::string& name, int64_t bytes) { add_row(tier, name, bytes, false); }
void MemoryAccount::add_measured(Tier tier, const std::string& name, int64_t bytes) { add_row(tier, name, bytes, true); }

void MemoryAccount::add_row(Tier tier, const std::string& name, int64_t bytes, bool measured) {
  std::lock_guard<std::mutex> lock(mu_);
  const int t = static_cast<int>(tier);
  auto it = rows_[t].find(name);
  if (it == rows_[t].end()) {
    if (bound_)
      throw AccountError("a " + std::string(to_string(tier)) + " allocation of " + std::to_string(bytes) +
                         " bytes under '" + name + "', which is no row of the step's buffer table");
    it = rows_[t].emplace(name, Row{name, -1, 0, 0}).first;
  }
  Row& row = it->second;
  const step::PhaseMask now = in_phase_ ? step::phase_bit(phase_) : all_phases_;
  if (bound_ && bytes > 0 && (row.phases & now) != now)
    throw AccountError("row '" + name + "' of the step's buffer table is alive in " + phases_text(row.phases) +
                       ", and the run allocates " + std::to_string(bytes) + " bytes under it " +
                       (in_phase_ ? "in phase " + std::string(step::to_string(phase_))
                                  : "before the step, to hold through every phase") +
                       " (outside its phases)");
  if (!measured && row.capacity >= 0 && row.used + bytes > row.capacity)
    throw AccountError("row '" + name + "' of the step's buffer table holds " + std::to_string(row.capacity) +
                       " bytes, and the run needs " + std::to_string(row.used + bytes) + " under it (an undersized row)");
  row.used += bytes;
  row.high = std::max(row.high, row.used);
  used_[t] += bytes;
  // A category whose buffers are all freed leaves the breakdown (no zero entries).
  if ((by_cat_[t][row.category] += bytes) == 0) by_cat_[t].erase(row.category);
  if (used_[t] > peak_[t]) {
    peak_[t] = used_[t];
    at_peak_[t] = by_cat_[t];
  }
  if (tier == Tier::device && in_phase_) phase_high_[phase_] = std::max(phase_high_[phase_], used_[t]);
}

int64_t MemoryAccount::in_use(Tier tier) const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_[static_cast<int>(tier)];
}

int64_t MemoryAccount::peak(Tier tier) const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_[static_cast<int>(tier)];
}

std::map<std::string, int64_t> MemoryAccount::peak_by_category(Tier tier) const {
  std::lock_guard<std::mutex> lock(mu_);
  return at_peak_[static_cast<int>(tier)];
}

std::map<std::string, int64_t> MemoryAccount::row_high_water(Tier tier) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, int64_t> m;
  for (const auto& [name, r] : rows_[static_cast<int>(tier)])
    if (r.high > 0) m[name] = r.high;
  return m;
}

void MemoryAccount::enter_phase(step::Phase p) {
  std::lock_guard<std::mutex> lock(mu_);
  if (bound_)
    for (const auto& tier : rows_)
      for (const auto& [name, r] : tier)
        if (r.used > 0 && !(r.phases & step::phase_bit(p)))
          throw AccountError("row '" + name + "' of the step's buffer table is alive in " + phases_text(r.phases) +
                             ", and the run still holds " + std::to_string(r.used) + " bytes under it as phase " +
                             step::to_string(p) + " begins (past its phases)");
  in_phase_ = true;
  phase_ = p;
  phase_high_[p] = std::max(phase_high_[p], used_[0]);
}

std::map<step::Phase, int64_t> MemoryAccount::phase_high_water() const {
  std::lock_guard<std::mutex> lock(mu_);
  return phase_high_;
}

void MemoryAccount::reset_peaks() {
  std::lock_guard<std::mutex> lock(mu_);
  for (int t = 0; t < 2; ++t) {
    peak_[t] = used_[t];
    at_peak_[t] = by_cat_[t];
    for (auto& [name, r] : rows_[t]) r.high = r.used;
  }
  phase_high_.clear();
  if (in_phase_) phase_high_[phase_] = used_[0];
}

}  // namespace oomb::executor
