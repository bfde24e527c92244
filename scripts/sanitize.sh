#!/usr/bin/env bash
# The sanitizer job (issue #13): builds oomb with AddressSanitizer + UndefinedBehaviorSanitizer
# (GUI and CUDA off) in its own build directory and runs the cpu-labelled tests except fidelity
# (timing-sensitive, and meaningless under a sanitizer's slowdown). Any sanitizer report fails the
# test that triggered it (halt_on_error). Test time limits are 4x the normal build's
# (OOMB_TEST_TIMEOUT_SCALE). Not part of CI: see README, "Hostile input".
# Usage: scripts/sanitize.sh [extra ctest arguments]   (OOMB_ASAN_BUILD_DIR, OOMB_JOBS)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${OOMB_ASAN_BUILD_DIR:-build-asan}
jobs=${OOMB_JOBS:-$(nproc)}
# float-cast-overflow is not part of GCC's "undefined": a double beyond int64 cast to int64 (a
# hostile 1e300 in an input) is undefined behaviour too.
san="-fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=undefined,float-cast-overflow -fno-omit-frame-pointer"
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
start=$(date +%s)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DOOMB_CUDA=OFF -DOOMB_GUI=OFF -DOOMB_TEST_TIMEOUT_SCALE=4 "-DCMAKE_CXX_FLAGS=$san" "-DCMAKE_EXE_LINKER_FLAGS=$san" "${launcher[@]}" >/dev/null
cmake --build "$build" -j "$jobs"
built=$(date +%s)
# Leak checking is off: LeakSanitizer needs ptrace, which containers often refuse.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
rc=0
ctest --test-dir "$build" -L cpu -E '^fidelity$' -j "$jobs" --output-on-failure "$@" || rc=$?
echo "sanitize: build $((built - start)) s, tests $(($(date +%s) - built)) s, exit $rc"
exit $rc
