#include "executor/runtime/backend.h"

#include <cstdio>
#include <exception>

#include "core/error.h"
#include "executor/runtime/memory_account.h"

namespace oomb::executor {

const char* to_string(Tier t) { return t == Tier::device ? "device" : "host"; }
const char* to_string(CopyDir d) { return d == CopyDir::h2d ? "h2d" : "d2h"; }

int64_t page_dtype_bytes(PageDtype d) { return d == PageDtype::bf16 ? 2 : 4; }
const char* to_string(PageDtype d) { return d == PageDtype::bf16 ? "bf16" : "fp32"; }

PageDtype page_dtype_from_string(const std::string& name, const std::string& flag) {
  if (name == "fp32") return PageDtype::f32;
  if (name == "bf16") return PageDtype::bf16;
  throw Error(flag, name, "the executor stores KV and KV-gradient pages as fp32 or bf16 only (" + name +
                              " pages are modelled by simulate and plan, not executed)",
              "fp32 or bf16");
}

DType storage_dtype_from_string(const std::string& name, const std::string& flag) {
  if (name == "fp32") return DType::f32;
  if (name == "bf16") return DType::bf16;
  throw Error(flag, name, "the executor stores weights, gradients, activations and loss tiles as fp32 or bf16 only",
              "fp32 or bf16");
}

void Backend::cross_entropy_acc(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets, float scale,
                                Tensor grad, int64_t slot) {
  OOMB_ASSERT(slot >= 0);
  if (static_cast<int64_t>(loss_slots_.size()) <= slot) loss_slots_.resize(static_cast<size_t>(slot) + 1, 0.0);
  loss_slots_[static_cast<size_t>(slot)] += cross_entropy(logits, rows, vocab, targets, scale, grad);
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

Buffer::Buffer(Backend& b, Tier tier, int64_t bytes, MemoryAccount* account, std::string category, DType dtype)
    : backend_(&b), bytes_(bytes), tier_(tier), dtype_(dtype), account_(account), category_(std::move(category)) {
  ptr_ = bytes > 0 ? b.allocate(tier, bytes) : nullptr;
  if (account_) account_->add(tier_, category_, bytes_);
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
                   to_string(tier_), category_.empty() ? "uncategorised" : category_.c_str(), e.what());
    }
  }
  if (account_) account_->add(tier_, category_, -bytes_);
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
    category_ = std::move(o.category_);
    o.backend_ = nullptr;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
    o.account_ = nullptr;
  }
  return *this;
}

void MemoryAccount::add(Tier tier, const std::string& category, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const int t = static_cast<int>(tier);
  used_[t] += bytes;
  // A category whose buffers are all freed leaves the breakdown (no zero entries).
  if ((by_cat_[t][category] += bytes) == 0) by_cat_[t].erase(category);
  if (used_[t] > peak_[t]) {
    peak_[t] = used_[t];
    at_peak_[t] = by_cat_[t];
  }
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

void MemoryAccount::reset_peaks() {
  std::lock_guard<std::mutex> lock(mu_);
  for (int t = 0; t < 2; ++t) {
    peak_[t] = used_[t];
    at_peak_[t] = by_cat_[t];
  }
}

}  // namespace oomb::executor
