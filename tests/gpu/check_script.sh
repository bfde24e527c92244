#!/usr/bin/env bash
# CTest (label cpu) of tests/gpu/run.sh on a machine without a GPU: --quick checks its own budget
# arithmetic (its steps, and 15 minutes of device time with a rerun) and stops at "no device" (exit 0) leaving only summary.txt and building nothing; a
# budget that cannot hold the essential steps is refused (exit 2). With a GPU, --dry-run stops
# before the build instead. Usage: tests/gpu/check_script.sh SCRATCH_DIR
set -uo pipefail
scratch=${1:?usage: tests/gpu/check_script.sh SCRATCH_DIR}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$scratch"
mkdir -p "$scratch"
fail() { echo "FAIL: $*"; exit 1; }
dry=()
nvidia-smi -L >/dev/null 2>&1 && dry=(--dry-run)

OOMB_GPU_BUILD_DIR=$scratch/build bash "$here/run.sh" --quick "${dry[@]}" "$scratch/out" >"$scratch/log" 2>&1
rc=$?
cat "$scratch/log"
((rc == 0)) || fail "run.sh --quick exited $rc"
grep -q "^budget arithmetic: ok" "$scratch/out/summary.txt" || fail "no budget check in summary.txt"
grep -qE "^device time: .* <= 900 s \(15 minutes\): fits" "$scratch/out/summary.txt" ||
  fail "--quick with a rerun does not fit 15 minutes of device time"
grep -qE "^(no device|dry run)" "$scratch/out/summary.txt" || fail "did not stop at 'no device'"
[ -e "$scratch/build" ] && fail "it configured or built something"
[ "$(ls -A "$scratch/out")" = summary.txt ] || fail "OUTDIR holds more than summary.txt: $(ls -A "$scratch/out")"

OOMB_GPU_BUDGET_S=120 OOMB_GPU_BUILD_DIR=$scratch/build bash "$here/run.sh" --quick "$scratch/out2" >"$scratch/log2" 2>&1
rc=$?
((rc == 2)) || fail "a 120 s budget for --quick was not refused (exit $rc)"
grep -q "^budget arithmetic: the essential steps need" "$scratch/out2/summary.txt" || fail "no reason for the refusal"
[ -e "$scratch/build" ] && fail "it built something with a refused budget"

bash "$here/run.sh" --bogus "$scratch/out3" >/dev/null 2>&1
(($? == 2)) || fail "an unknown option was not refused with exit 2"
echo "PASS"
