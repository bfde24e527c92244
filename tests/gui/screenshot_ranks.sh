#!/usr/bin/env bash
# oomb-gui --screenshot of a real two-rank run: `mpirun -np 2 oomb run` of a tensor-parallel plan
# writes t.json and t.rank1.json; the GUI given rank 0's trace and --rank 1 overlays rank 1 and draws
# the ranks panel with its combo; a rank beyond the run or a missing rank's trace is refused (exit 2).
# Usage: screenshot_ranks.sh OOMB OOMB_GUI OOMB_GUI_CHECK_PNG OUT.png   (exit 77: skipped, no MPI)
set -u
oomb=$1 gui=$2 check=$3 out=$4
command -v mpirun >/dev/null || { echo "skipped: no mpirun (apt install openmpi-bin)"; exit 77; }
"$oomb" --version | grep -q "mpi=yes" || { echo "skipped: oomb built without MPI"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
"$oomb" plan --model tiny --gpu h200 --context 4K --chunk 1K --page 64 --resident-layers 1 --gpus 2 \
  --out "$tmp/p.json" >/dev/null 2>&1 || fail "oomb plan"
mpirun --oversubscribe -np 2 "$oomb" run --plan "$tmp/p.json" --backend cpu --trace "$tmp/t.json" --warmup 0 \
  --steps 1 --quiet >/dev/null 2>&1 || fail "mpirun -np 2 oomb run"
[ -f "$tmp/t.rank1.json" ] || fail "no t.rank1.json beside t.json"
xvfb=(xvfb-run -a -s "-screen 0 1280x800x24")
shot=$("${xvfb[@]}" "$gui" --screenshot "$out" --frames 3 --width 1280 --height 800 --trace "$tmp/t.json" --rank 1 2>&1) ||
  fail "oomb-gui --rank 1: $shot"
echo "$shot"
grep -q "overlay rank 1 of 2 ($tmp/t.rank1.json)" <<<"$shot" || fail "rank 1's trace is not the one overlaid"
grep -q "the ranks panel shows rank 1 of 2 in its combo" <<<"$shot" || fail "no rank combo drawn"
grep -q "layout: 0 table cells cut" <<<"$shot" || fail "a table cell is cut (or the layout check did not run)"
"$check" "$out" 1280 800 || fail "the screenshot"
# Refused before a window opens, naming the flag and what would be valid.
no=$(DISPLAY= "$gui" --trace "$tmp/t.json" --rank 2 2>&1)
[ $? -eq 2 ] && grep -q -- "--rank: '2': rank 2 is beyond the run's world size: .* (ranks 0..1)" <<<"$no" ||
  fail "--rank 2 of a 2-rank run: $no"
mv "$tmp/t.rank1.json" "$tmp/moved.json"
no=$(DISPLAY= "$gui" --trace "$tmp/t.json" --rank 1 2>&1)
[ $? -eq 2 ] && grep -q -- "--rank: '1': rank 1's trace is missing: $tmp/t.rank1.json" <<<"$no" ||
  fail "--rank 1 with its trace missing: $no"
echo "screenshot_ranks: ok"
