#!/usr/bin/env bash
# The emulated CUDA device under sanitizers: builds oomb with OOMB_CUDA=EMULATED (the CUDA backend's
# kernels and host code compiled as C++ on the emulated device, executor/emulated_cuda) and runs the
# emulated tests (tests/emulated_cuda, tests/cuda and the whole runs of tests/cli/emulated_runs.sh,
# label `emulated`) under
#   asan: AddressSanitizer + UndefinedBehaviorSanitizer: out-of-bounds reads and writes in kernels
#         (global memory is cudaMalloc'd heap, dynamic shared memory an exact-size heap block,
#         static __shared__ arrays thread-local objects), use after cudaFree;
#   tsan: ThreadSanitizer: races between the host and the emulated streams' workers (a missing
#         stream synchronisation in host code), between streams, and between the CUDA threads
#         of a block, which are fibers announced to TSan (a missing __syncthreads shows as a race).
# Each in its own build directory (build-asan-emulated, build-tsan-emulated). Any report fails the
# test that triggered it. Not part of CI (a build takes about as long as the normal one).
# Usage: scripts/sanitize_emulated_cuda.sh [asan|tsan|both] [extra ctest arguments]   (OOMB_JOBS)
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-both}
[[ $# -gt 0 ]] && shift
case "$which" in
  asan | tsan | both) ;;
  *) echo "usage: scripts/sanitize_emulated_cuda.sh [asan|tsan|both] [ctest arguments]" >&2; exit 2 ;;
esac
jobs=${OOMB_JOBS:-$(nproc)}
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi

run_one() {
  local kind=$1 san build
  shift
  case "$kind" in
    asan) san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" ;;
    tsan) san="-fsanitize=thread -fno-omit-frame-pointer" ;;
  esac
  build=build-$kind-emulated
  local start built rc=0
  start=$(date +%s)
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
    -DOOMB_CUDA=EMULATED -DOOMB_GUI=OFF -DOOMB_TEST_TIMEOUT_SCALE=8 "-DCMAKE_CXX_FLAGS=$san" \
    "-DCMAKE_EXE_LINKER_FLAGS=$san" "-DCMAKE_SHARED_LINKER_FLAGS=$san" "${launcher[@]}" >/dev/null
  # oomb too: cli.emulated_runs (label emulated) runs whole plans through it under the sanitizer.
  cmake --build "$build" -j "$jobs" --target oomb_emulated_cuda_tests oomb_cuda_tests oomb
  built=$(date +%s)
  # TSan: the CPU reference backend's OpenMP runtime (libgomp) is not instrumented, so TSan takes its
  # fork/join and critical sections for races (every test that builds a CpuBackend reported one).
  # One CPU makes the reference single-threaded (its thread count is the CPUs this process may use),
  # and TSan reports only the emulated device's and the CUDA host code's threads (slower: one CPU).
  local pin=()
  if [[ $kind == tsan ]] && command -v taskset >/dev/null; then pin=(taskset -c 0); fi
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1:detect_stack_use_after_return=0} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan_suppressions.txt} \
    "${pin[@]}" ctest --test-dir "$build" -L emulated -j "$jobs" --output-on-failure "$@" || rc=$?
  echo "sanitize_emulated_cuda $kind: build $((built - start)) s, tests $(($(date +%s) - built)) s, exit $rc"
  return $rc
}

rc=0
if [[ $which == asan || $which == both ]]; then run_one asan "$@" || rc=$?; fi
if [[ $which == tsan || $which == both ]]; then run_one tsan "$@" || rc=$?; fi
exit $rc
