#!/usr/bin/env bash
# Behaviour kept through a refactor: runs one set of plan / simulate / validate commands with two
# oomb binaries and says, file by file, what is byte-identical and what differs.
#   scripts/compare_outputs.sh OLD_OOMB NEW_OOMB [WORK_DIR]
# The traces validated are recorded once, by OLD_OOMB (a tiny CPU run, dense and sparse), so both
# binaries judge the same files. Search times differ from run to run (plan text and "search_s").
set -euo pipefail
old=${1:?usage: compare_outputs.sh OLD_OOMB NEW_OOMB [WORK_DIR]}
new=${2:?usage: compare_outputs.sh OLD_OOMB NEW_OOMB [WORK_DIR]}
work=${3:-$(mktemp -d -t oomb-compare-XXXXXX)}
old=$(realpath "$old"); new=$(realpath "$new")
mkdir -p "$work/old" "$work/new" "$work/traces"
cd "$work/traces"
"$old" plan --model tiny --gpu h200 --context 4K --chunk 1K --page 64 --resident-layers 1 --out dense.json >/dev/null
"$old" plan --model tiny --gpu h200 --context 4K --chunk 1K --page 64 --resident-layers 1 --attention sparse \
  --budget 8 --out sparse.json >/dev/null
"$old" run --plan dense.json --trace dense_trace.json --quiet >/dev/null
"$old" run --plan sparse.json --trace sparse_trace.json --quiet >/dev/null
for side in old new; do
  bin=$old; [ "$side" = new ] && bin=$new
  cd "$work/$side"
  run() { local name=$1; shift; "$bin" "$@" >"$name.out" 2>"$name.err" && echo "rc=0" >>"$name.out" || echo "rc=$?" >>"$name.out"; }
  run plan1 plan --model qwen2.5-7b --gpu h200 --context 4M --out plan1.json
  run plan1j plan --model qwen2.5-7b --gpu h200 --context 4M --json
  run plan2 plan --model qwen2.5-72b --gpu h200 --context 1M --gpus 8 --pareto --out plan2.json
  run plan3 plan --model qwen2.5-7b --gpu h100-sxm --context 4M --gpus 8
  run plan4 plan --model qwen2.5-7b --gpu h200 --context 1M --data-parallel 4 --shard-optimizer true --out plan4.json
  run plan5 plan --model qwen2.5-32b --gpu h200 --context 1M --lora-rank 16 --out plan5.json
  run plan6 plan --model qwen2.5-7b --gpu h200 --max-context --max-step-time 1h
  run sim1 simulate --model qwen2.5-7b --gpu h200 --context 4M --json
  run sim2 simulate --plan plan1.json --json
  run sim3 simulate --preset oomb-published --model qwen2.5-7b --gpu h200 --context 4M --attention sparse --json
  run sim4 simulate --model qwen2.5-7b --gpu h200 --context 256K --timeline t.json --chrome t.perfetto.json --report r.html
  run sim5 simulate --model qwen2.5-7b --gpu h200 --context 4M
  for t in dense sparse; do
    run "val_$t" validate --plan "$work/traces/$t.json" --trace "$work/traces/${t}_trace.json"
    run "valj_$t" validate --plan "$work/traces/$t.json" --trace "$work/traces/${t}_trace.json" --json
    run "rep_$t" validate --plan "$work/traces/$t.json" --trace "$work/traces/${t}_trace.json" --report "rep_$t.html"
  done
done
cd "$work"
for f in $(ls old); do
  if cmp -s "old/$f" "new/$f"; then echo "same $f"; else echo "DIFF $f"; fi
done
echo "outputs in $work/old and $work/new"
