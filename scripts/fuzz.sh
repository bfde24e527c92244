#!/usr/bin/env bash
# Long fuzz runs (issue #13): every target of tests/fuzz/oomb_fuzz (or the ones named) for
# CPU_SECONDS of this process's CPU time each (default 600), from a fresh seed. CPU time, not wall
# clock, so a run niced on a loaded machine still gets that much fuzzing. An input that takes more
# than 60 CPU seconds counts as a hang. Inputs that crash or hang are copied into
# tests/fuzz/corpus/TARGET/: fix the bug, keep the input, commit both. CI runs the same targets
# with a fixed budget (ctest -R '^fuzz\.').
# With OOMB_BUILD_DIR=build-asan (after scripts/sanitize.sh) it fuzzes the sanitizer build: memory
# errors and undefined behaviour fail too; ASan's reports are printed from the crash directory
# (the CLI targets silence stderr; for UBSan's, see below).
# OOMB_FUZZ_WALL_SECONDS also caps each target's wall-clock time (for a deadline on a busy machine).
# Usage: scripts/fuzz.sh [CPU_SECONDS] [TARGET...]   (OOMB_BUILD_DIR, OOMB_FUZZ_SEED, OOMB_FUZZ_WALL_SECONDS)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${OOMB_BUILD_DIR:-build}
seconds=${1:-600}
shift || true
cmake --build "$build" --target oomb_fuzz >/dev/null
fuzz="$build/oomb_fuzz"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then mapfile -t targets < <("$fuzz" --list | cut -d' ' -f1); fi
seed=${OOMB_FUZZ_SEED:-$(date +%s)}
crashes=$(mktemp -d)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1:log_path=$crashes/sanitizer}
# abort_on_error for UBSan too: its report then ends in SIGABRT, which the driver catches to save the
# input (without it UBSan exits 1 and the input is lost). This runtime prints UBSan's reports to
# stderr whatever log_path says, so a CLI target's (stderr on /dev/null) is lost: replay the saved
# input (copy it into the corpus and run the target) to see it.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:abort_on_error=1:log_path=$crashes/sanitizer}
echo "fuzz: ${#targets[@]} target(s), ${seconds} CPU s each, seed $seed"
wall=()
if [ -n "${OOMB_FUZZ_WALL_SECONDS:-}" ]; then wall=(--seconds "$OOMB_FUZZ_WALL_SECONDS"); fi
failed=()
for t in "${targets[@]}"; do
  "$fuzz" "$t" --iterations 0 --cpu-seconds "$seconds" --seed "$seed" --crashes "$crashes" "${wall[@]}" || failed+=("$t")
done
for f in "$crashes"/crash-*; do
  [ -e "$f" ] || continue
  name=${f##*/crash-}
  cp "$f" "tests/fuzz/corpus/${name%-*}/crash-$seed-${name##*-}"
  echo "fuzz: crash input kept in tests/fuzz/corpus/${name%-*}/crash-$seed-${name##*-}"
done
for f in "$crashes"/sanitizer.*; do
  [ -e "$f" ] || continue
  echo "fuzz: sanitizer report $f:"
  cat "$f"
done
rm -rf "$crashes"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (replay: $fuzz TARGET --seed $seed)"
  exit 1
fi
echo "fuzz: no crash"
