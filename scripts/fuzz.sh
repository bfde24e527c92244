#!/usr/bin/env bash
# Long fuzz runs (issue #13): every target of tests/fuzz/oomb_fuzz (or the ones named) for SECONDS
# each (default 600), from a fresh seed. Inputs that crash are copied into
# tests/fuzz/corpus/TARGET/: fix the bug, keep the input, commit both. CI runs the same targets with
# a fixed budget (ctest -R '^fuzz\.').
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]   (OOMB_BUILD_DIR, OOMB_FUZZ_SEED)
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
echo "fuzz: ${#targets[@]} target(s), ${seconds} s each, seed $seed"
failed=()
for t in "${targets[@]}"; do
  "$fuzz" "$t" --iterations 0 --seconds "$seconds" --seed "$seed" --crashes "$crashes" || failed+=("$t")
done
for f in "$crashes"/crash-*; do
  [ -e "$f" ] || continue
  name=${f##*/crash-}
  cp "$f" "tests/fuzz/corpus/${name%-*}/crash-$seed-${name##*-}"
  echo "fuzz: crash input kept in tests/fuzz/corpus/${name%-*}/crash-$seed-${name##*-}"
done
rm -rf "$crashes"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (replay: $fuzz TARGET --seed $seed)"
  exit 1
fi
echo "fuzz: no crash"
