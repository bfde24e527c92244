#pragma once
// Deterministic parallel loops of the CPU kernels (internal). Work is cut into pieces fixed by the
// shapes (never by the thread count) and any reduction adds the pieces' partial results in piece
// order, so every thread count gives bit-identical results. Called inside a parallel region (a
// loop over heads that calls a row op) the inner loop runs on the calling thread.
#include <algorithm>
#include <cstdint>

namespace oomb::executor::cpu {

// Work (elements touched, or flops for the matrix kernels) below which a loop stays on one
// thread. A parallel region costs a wake-up of every thread and a barrier: microseconds on an idle
// machine, a scheduler time slice when the cores are shared with other processes; so regions are
// kept coarse (a millisecond of work or more).
constexpr int64_t kParallelMinWork = int64_t{1} << 16;
constexpr int64_t kParallelMinFlops = int64_t{1} << 22;

inline int64_t pieces_of(int64_t n, int64_t grain) { return (n + grain - 1) / grain; }

// f(begin, end) for the pieces [p * grain, min(n, (p + 1) * grain)); work = total elements touched.
template <class F>
void parallel_pieces(int64_t n, int64_t grain, int64_t work, F&& f) {
  const int64_t pieces = pieces_of(n, grain);
#pragma omp parallel for schedule(static) if (pieces > 1 && work >= kParallelMinWork)
  for (int64_t p = 0; p < pieces; ++p) f(p * grain, std::min(n, (p + 1) * grain));
}

// f(i) for i < n, dynamically scheduled (uneven items, e.g. causal attention pages); flops = the
// items' total work.
template <class F>
void parallel_items(int64_t n, double flops, F&& f) {
#pragma omp parallel for schedule(dynamic, 1) if (n > 1 && flops >= static_cast<double>(kParallelMinFlops))
  for (int64_t i = 0; i < n; ++i) f(i);
}

}  // namespace oomb::executor::cpu
