#pragma once
// The executor's independent account of memory: every device- and host-tier allocation of the
// runtime and of the backend is recorded under a row of the step's buffer table (step/buffers.h):
// bytes in use per row and tier, the peaks and the breakdown by category at each tier's peak, and
// each phase's high-water mark. Bound to a table, an allocation under a name that is no row of it,
// one that takes a row past its bytes (an undersized row), or one in a phase its row is not alive in
// (before the first phase: a row alive in every phase), throws, and so does a row still holding
// bytes when a phase it is not alive in begins: nothing is allocated outside the table, no row is
// exceeded and no row outlives its lifetime silently. Unbound (tests of the pools alone), every name is its
// own category and nothing is refused. Device bytes in use = the pools' allocations (whole, from
// construction) + every other buffer; the pages in use are counted apart.
#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "executor/runtime/backend.h"
#include "step/buffers.h"

namespace oomb::executor {

// An allocation the bound table does not hold: a bug of the executor or of the table, never of
// the input (the plan check refuses a plan whose rows are too small before anything is allocated).
class AccountError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

class MemoryAccount {
 public:
  // From now on every allocation must name a row of `rows` (name and tier) alive in the current phase.
  void bind(const std::vector<step::BufferRow>& rows);
  void add(Tier tier, const std::string& row, int64_t bytes);  // bytes may be negative (a free)
  // Bytes a library took under `row` as measured (NCCL's buffers: the device's free memory before
  // and after its set-up): counted like an allocation, but not refused past the row's bytes (the row
  // is a model of someone else's allocator; validate judges the gap, peak:<category>).
  void add_measured(Tier tier, const std::string& row, int64_t bytes);
  int64_t in_use(Tier tier) const;
  int64_t peak(Tier tier) const;
  std::map<std::string, int64_t> peak_by_category(Tier tier) const;  // at the moment of the tier's peak
  // Rows' high-water marks (bytes in use at once under each row) since the last reset_peaks.
  std::map<std::string, int64_t> row_high_water(Tier tier) const;
  // Per-phase device high-water marks: a phase's mark is the most bytes in use while it was the
  // current phase (set by enter_phase), since the last reset_peaks. Bound, entering p throws for a
  // row holding bytes that is not alive in p.
  void enter_phase(step::Phase p);
  std::map<step::Phase, int64_t> phase_high_water() const;
  int64_t pool_pages_in_use() const { return pool_pages_; }
  void add_pool_pages(int64_t pages) { pool_pages_ += pages; }
  void reset_peaks();

 private:
  void add_row(Tier tier, const std::string& row, int64_t bytes, bool measured);
  struct Row {
    std::string category;
    int64_t capacity = -1;  // -1: unbound
    step::PhaseMask phases = 0;
    int64_t used = 0, high = 0;
  };
  mutable std::mutex mu_;
  bool bound_ = false;
  step::PhaseMask all_phases_ = 0;  // of the bound rows: what an allocation before the first phase lives through
  std::map<std::string, Row> rows_[2];
  int64_t used_[2] = {0, 0};
  int64_t peak_[2] = {0, 0};
  std::map<std::string, int64_t> by_cat_[2];
  std::map<std::string, int64_t> at_peak_[2];
  bool in_phase_ = false;
  step::Phase phase_ = step::Phase::fill;
  std::map<step::Phase, int64_t> phase_high_;
  int64_t pool_pages_ = 0;
};

}  // namespace oomb::executor
