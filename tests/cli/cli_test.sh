#!/usr/bin/env bash
# End-to-end checks of the oomb CLI: outputs, JSON keys, and bad input -> clear message + exit 2.
# Usage: cli_test.sh path/to/oomb [path/to/oomb_cupti_synth]
# (the second defaults to oomb_cupti_synth next to oomb; without it the CUPTI-trace checks are skipped)
set -u
oomb=$1
synth=${2:-$(dirname "$oomb")/oomb_cupti_synth}
tmp=$(mktemp -d)
src=$(cd "$(dirname "$0")/../.." && pwd)  # the repository (its tests/models/hf_configs)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

# expect_exit CODE PATTERN ARGS...: exit code CODE and stderr+stdout matching PATTERN.
expect_exit() {
  local code=$1 pattern=$2
  shift 2
  local out rc
  out=$("$oomb" "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$code" ]; then bad "oomb $* -> exit $rc, want $code: $out"; return; fi
  if ! grep -qE -- "$pattern" <<<"$out"; then bad "oomb $* -> output lacks /$pattern/: $out"; return; fi
  ok
}

expect_exit 0 "features: cuda=(yes|no|emulated) cupti=(yes|no|emulated) nccl=(yes|no|emulated) gui=(yes|no)" --version
expect_exit 0 "qwen2.5-7b" models
expect_exit 0 "FITS" simulate --model qwen2.5-7b --gpu h200 --context 4M
expect_exit 0 "host_kv_grad_pages +448.00 GiB" simulate --preset oomb-published --model qwen2.5-7b --gpu h200 --context 4M --attention sparse
expect_exit 0 "OOM" sweep --model qwen2.5-7b --gpu h200 --contexts 8K..1M
# The phase holding the device peak is named (buffer lifetimes, docs/model.md); the loss dtype is a knob.
expect_exit 0 "in phase loss" simulate --preset oomb-published --model qwen2.5-7b --gpu h200 --context 4M --attention sparse
expect_exit 0 "logits_upcast" simulate --model tiny --gpu h200 --context 8K --loss-dtype fp32 --logits-chunk 0
# LoRA: planned and simulated next to full fine-tuning; run on the CPU (trained embeddings refused by name).
expect_exit 0 "lora_adapters" simulate --model qwen2.5-7b --gpu h200 --context 64K --lora-rank 16
expect_exit 0 "Full fine-tuning, its best plan" plan --model qwen2.5-7b --gpu h200 --context 64K --lora-rank 16 --lora-targets all-linear
# Data parallelism: the all-reduce priced per rank; oomb run without mpirun says how to launch it.
expect_exit 0 "Gradient all-reduce \(data parallel x4, ring\)" simulate --model qwen2.5-7b --gpu h200 --context 64K --data-parallel 4 --optimizer gpu
expect_exit 2 "--data-parallel.*mpirun -np 2" run --model tiny --context 256 --chunk 256 --page 64 --data-parallel 2
expect_exit 2 "--data-parallel.*\[1, 4096\]" simulate --model tiny --gpu h200 --context 8K --data-parallel 0
# ZeRO-1: the AdamW state sharded over the replicas; refused by name where there is nothing to shard over.
expect_exit 0 "sharded over the 4 data-parallel replicas" simulate --model qwen2.5-7b --gpu h200 --context 64K --data-parallel 4 --optimizer gpu --shard-optimizer true
expect_exit 2 "--shard-optimizer.*data-parallel replicas, and there is one" simulate --model tiny --gpu h200 --context 8K --optimizer gpu --shard-optimizer true
expect_exit 2 "--shard-optimizer.*LoRA" plan --model tiny --gpu h200 --context 8K --data-parallel 2 --lora-rank 4 --shard-optimizer true
expect_exit 2 "--shard-optimizer.*true or false" simulate --model tiny --gpu h200 --context 8K --data-parallel 2 --shard-optimizer maybe
expect_exit 2 "--lora-targets.*qkv" plan --model qwen2.5-7b --gpu h200 --context 64K --lora-rank 16 --lora-targets q_proj,qkv
expect_exit 2 "--lora-alpha.*no --lora-rank" simulate --model qwen2.5-7b --gpu h200 --context 64K --lora-alpha 16
expect_exit 0 "LoRA rank 4 .*the base frozen" run --model tiny --context 256 --chunk 256 --page 64 --lora-rank 4
expect_exit 2 "--lora-train-embeddings.*not executed" run --model tiny --context 256 --chunk 256 --page 64 --lora-rank 4 --lora-train-embeddings true
expect_exit 2 "--loss-dtype.*bf16" simulate --model tiny --gpu h200 --context 8K --loss-dtype fp16
# --resident-layers all means every layer that runs, also under --layers (the issue #15 command).
expect_exit 0 "FITS" simulate --model qwen2.5-0.5b --layers 2 --gpu h200 --context 1K --chunk 1K --resident-layers all
expect_exit 2 "--resident-layers.*1..2" simulate --model qwen2.5-0.5b --layers 2 --gpu h200 --context 1K --chunk 1K --resident-layers 3
expect_exit 0 "Plan written" plan --model tiny --gpu h200 --context 8K --loss-dtype bf16 --out "$tmp/loss.json"
grep -q '"loss_dtype": "bf16"' "$tmp/loss.json" && ok || bad "plan --loss-dtype bf16 not in the plan"
grep -q '"buffers"' "$tmp/loss.json" && ok || bad "plan lacks the buffer table"

# JSON summary has exactly the documented keys.
"$oomb" simulate --model qwen2.5-7b --gpu h200 --context 1M --json >"$tmp/s.json" || bad "simulate --json failed"
for key in peak_device_bytes peak_host_bytes step_s tokens_per_s h2d_bytes d2h_bytes exposed_copy_s \
           required_h2d_bytes_per_s required_d2h_bytes_per_s device_pool_pages device_breakdown_bytes feasible \
           binding_constraint peak_phase; do
  if grep -q "\"$key\"" "$tmp/s.json"; then ok; else bad "simulate --json lacks $key"; fi
done

# Timelines are written and readable.
expect_exit 0 "timeline" simulate --model tiny --gpu h200 --context 64K --chunk 4K --resident-layers 1 --timeline "$tmp/t.json" --chrome "$tmp/c.json"
grep -q '"oomb.trace/1"' "$tmp/t.json" && ok || bad "timeline lacks schema"
grep -q '"traceEvents"' "$tmp/c.json" && ok || bad "chrome trace lacks traceEvents"

# Bad input: message naming the flag, exit code 2, nothing written.
expect_exit 2 "--context" simulate --model qwen2.5-7b --gpu h200 --context 0
expect_exit 2 "--context" simulate --model qwen2.5-7b --gpu h200 --context -5
expect_exit 2 "--context" simulate --model qwen2.5-7b --gpu h200 --context 4Q
expect_exit 2 "overflows" simulate --model qwen2.5-7b --gpu h200 --context 99999999999999999999
expect_exit 2 "--context" simulate --model qwen2.5-7b --gpu h200 --context 9000000000000M
expect_exit 2 "--chunk.*multiple" simulate --model qwen2.5-7b --gpu h200 --context 4M --chunk 1000
expect_exit 2 "--budget" simulate --model qwen2.5-7b --gpu h200 --context 4M --attention sparse --budget 0
expect_exit 2 "known: .*qwen2.5-7b" simulate --model qwen9 --gpu h200 --context 4M
expect_exit 2 "known: .*h200" simulate --model qwen2.5-7b --gpu h900 --context 4M
expect_exit 2 "--gpus" simulate --model qwen2.5-7b --gpu h200 --context 4M --gpus 3
# Nodes: the replicas spread evenly; the gradient all-reduce crosses the host's network.
expect_exit 2 "--nodes.*does not divide the 3 data-parallel replica" simulate --model tiny --gpu h200 --context 8K --data-parallel 3 --nodes 2
expect_exit 2 "--nodes.*\[1, 4096\]" simulate --model tiny --gpu h200 --context 8K --nodes 0
expect_exit 0 "across 2 nodes" plan --model qwen2.5-7b --gpu h100-sxm --context 1M --gpus 8 --nodes 2
# oomb plan --gpus 8 --nodes 2 writes every GPU into the plan: TP 4 x 4 replicas on 2 nodes.
if "$oomb" plan --model qwen2.5-7b --gpu h100-sxm --context 1M --gpus 8 --nodes 2 --out "$tmp/p16.json" >"$tmp/p16.txt" 2>&1 &&
  grep -q "mpirun -np 16 oomb run --plan P" "$tmp/p16.txt" &&
  grep -q '"gpus": 4' "$tmp/p16.json" && grep -q '"data_parallel": 4' "$tmp/p16.json" && grep -q '"nodes": 2' "$tmp/p16.json"; then
  ok
else
  bad "plan --gpus 8 --nodes 2 does not write TP 4 x 4 replicas on 2 nodes: $(cat "$tmp/p16.txt")"
fi
expect_exit 2 "--attention.*dense, sparse" simulate --model qwen2.5-7b --gpu h200 --context 4M --attention fuzzy
expect_exit 2 "--preset" simulate --model qwen2.5-7b --gpu h200 --context 4M --preset nope
expect_exit 2 "--contexts" sweep --model qwen2.5-7b --gpu h200 --contexts 4M..8K
expect_exit 2 "cannot open" simulate --model /nonexistent/m.json --gpu h200 --context 4M
printf '{"schema": "oomb.model/1", "id": "x"' >"$tmp/trunc.json"
expect_exit 2 "trunc.json.*not valid JSON" simulate --model "$tmp/trunc.json" --gpu h200 --context 4M
expect_exit 2 "--context" simulate --model qwen2.5-7b --gpu h200
expect_exit 2 "--detail" simulate --model tiny --gpu h200 --context 8K --timeline "$tmp/never.json" --detail frame
[ ! -e "$tmp/never.json" ] && ok || bad "a timeline was written despite the error"

# The headline plan: exact gradients by default, with the sparse speed-up stated.
expect_exit 0 "Sparse attention would be [0-9]+x faster" plan --model qwen2.5-7b --gpu h200 --context 4M
expect_exit 0 "attention dense" plan --model qwen2.5-7b --gpu h200 --context 4M

# Plan -> run -> validate on the CPU backend (dense, with offload: copies and pools must match exactly).
expect_exit 0 "Plan written" plan --model tiny --gpu h200 --context 4K --chunk 1K --page 64 --resident-layers 1 --out "$tmp/p.json"
expect_exit 0 "copies per step" run --plan "$tmp/p.json" --trace "$tmp/run.json" --quiet
expect_exit 0 "OK: every comparable term" validate --plan "$tmp/p.json" --trace "$tmp/run.json" --report "$tmp/v.html"
grep -q "<svg" "$tmp/v.html" && ok || bad "validate --report wrote no SVG"
"$oomb" validate --plan "$tmp/p.json" --trace "$tmp/run.json" --json >"$tmp/v.json" || bad "validate --json failed"
for key in '"ok": true' '"name": "h2d_bytes"' '"name": "d2h_bytes"' '"name": "pool_pages"' '"name": "peak_device_bytes"' '"name": "step_s"'; do
  grep -q "$key" "$tmp/v.json" && ok || bad "validate --json lacks $key"
done
# A measurement that disagrees fails with exit code 1.
sed 's/"h2d_bytes":\([0-9]*\)/"h2d_bytes":1\1/' "$tmp/run.json" >"$tmp/tampered.json"
expect_exit 1 "h2d_bytes .*FAIL" validate --plan "$tmp/p.json" --trace "$tmp/tampered.json"
# Sparse: the pools depend on the selection-overlap assumption. A random-weight tiny model's
# selections barely overlap, so the default (0.75) under-sizes the pools; validate says which overlap
# the run's unions imply, and a plan made with it validates.
sp=(--model tiny --gpu h200 --context 4K --chunk 512 --page 64 --resident-layers 1 --attention sparse --budget 2)
expect_exit 0 "Plan written" plan "${sp[@]}" --out "$tmp/ps.json"
expect_exit 0 "selection union per" run --plan "$tmp/ps.json" --trace "$tmp/runs.json" --quiet
out=$("$oomb" validate --plan "$tmp/ps.json" --trace "$tmp/runs.json" 2>&1)
[ $? -eq 1 ] && grep -qE "pool_pages .*FAIL" <<<"$out" && ok || bad "sparse validate at the default overlap: $out"
implied=$(sed -nE 's/.*re-plan with --selection-overlap ([0-9.]+) .*/\1/p' <<<"$out")
[ -n "$implied" ] && ok || bad "validate names no overlap to re-plan with: $out"
expect_exit 0 "Plan written" plan "${sp[@]}" --selection-overlap "${implied:-0}" --out "$tmp/ps2.json"
expect_exit 0 "selection union per" run --plan "$tmp/ps2.json" --trace "$tmp/runs2.json" --quiet
out=$("$oomb" validate --plan "$tmp/ps2.json" --trace "$tmp/runs2.json" 2>&1)
grep -qE "^  pool_pages +([0-9]+) +\1 .* ok" <<<"$out" && grep -q "OK: every comparable term" <<<"$out" && ok ||
  bad "sparse validate at the implied overlap $implied: $out"
# Without a plan, the trace's own configuration is predicted.
expect_exit 0 "no --plan" validate --trace "$tmp/run.json"
expect_exit 0 "times are compared against a cpu profile: --gpu cpu.json" validate --trace "$tmp/run.json"
# A trace is timed for validate as the fidelity suite times: a warm-up step, then the fastest of 3
# (stated in the trace), and records the cpu backend's compute threads.
for key in '"warmup_steps":1' '"timed_steps":3' '"statistic":"fastest"' '"cpu_threads":[0-9]' '"events":"timed steps only'; do
  grep -qE "$key" "$tmp/run.json" && ok || bad "run --trace lacks $key"
done
# Compute threads: refused when not positive; a cpu profile records its count, a plan keeps it, and
# validate refuses times measured at another count.
expect_exit 2 "--threads.*must be in \[0, 1024\]" run --model tiny --context 1K --threads -1
expect_exit 2 "--threads.*must be in \[0, 1024\]" calibrate --backend cpu --threads -2 --out "$tmp/never_cpu.json"
expect_exit 0 "compute threads +1" calibrate --backend cpu --model tiny --threads 1 --quiet --out "$tmp/cpu1.json"
grep -qE '"cpu_threads": ?1' "$tmp/cpu1.json" && ok || bad "calibrate --threads 1 profile lacks cpu_threads"
# The efficiencies are fitted to calibration runs of the first --model (issue #15), or not (none).
grep -q '"runs_fit"' "$tmp/cpu1.json" && ok || bad "calibrate --backend cpu profile lacks its calibration runs' fit"
expect_exit 2 "--fit-model.*nosuch" calibrate --backend cpu --model tiny --fit-model nosuch --out "$tmp/never_fit.json"
[ -e "$tmp/never_fit.json" ] && bad "calibrate with a bad --fit-model wrote a profile" || ok
expect_exit 0 "Plan written" plan --model tiny --gpu "$tmp/cpu1.json" --context 2K --chunk 512 --page 64 --out "$tmp/pcpu.json"
grep -qE '"cpu_threads": ?1' "$tmp/pcpu.json" && ok || bad "a plan on a cpu profile lost its cpu_threads"
"$oomb" run --plan "$tmp/pcpu.json" --threads 2 --quiet --trace "$tmp/t2.json" >/dev/null 2>&1 || bad "run --threads 2"
expect_exit 0 "step_s .*not comparable: run at 2 compute threads, .*calibrated at 1" validate --plan "$tmp/pcpu.json" --trace "$tmp/t2.json"
"$oomb" run --plan "$tmp/pcpu.json" --threads 1 --warmup 0 --steps 1 --quiet --trace "$tmp/t1.json" >/dev/null 2>&1 ||
  bad "run --threads 1"
out=$("$oomb" validate --plan "$tmp/pcpu.json" --trace "$tmp/t1.json" 2>&1)
grep -qE "step_s +[0-9.]+ [mun]?s +[0-9.]+ [mun]?s" <<<"$out" && ok || bad "validate at equal threads compares no step_s: $out"
# A trace of another configuration, a prediction, a truncated plan: exit 2.
expect_exit 0 "Plan written" plan --model tiny --gpu h200 --context 8K --out "$tmp/other.json"
expect_exit 2 "context_tokens.*differs from the plan" validate --plan "$tmp/other.json" --trace "$tmp/run.json"
expect_exit 0 "timeline" simulate --model tiny --gpu h200 --context 4K --timeline "$tmp/pred.json"
expect_exit 2 "prediction, not a measurement" validate --plan "$tmp/p.json" --trace "$tmp/pred.json"
head -c 200 "$tmp/p.json" >"$tmp/trunc_plan.json"
expect_exit 2 "trunc_plan.json" validate --plan "$tmp/trunc_plan.json" --trace "$tmp/run.json"
expect_exit 2 "--tolerance" validate --plan "$tmp/p.json" --trace "$tmp/run.json" --tolerance nosuch=0.1
# The plan's page dtypes are run (the planner picks bf16 KV pages) and predicted as run.
plan_kv=$(grep -oE '"kv_dtype": *"[a-z0-9]+"' "$tmp/p.json" | grep -oE '(fp32|bf16)"$' | tr -d '"')
plan_grad=$(grep -oE '"kv_grad_dtype": *"[a-z0-9]+"' "$tmp/p.json" | grep -oE '(fp32|bf16)"$' | tr -d '"')
[ "$plan_kv" = bf16 ] && ok || bad "the plan stores $plan_kv KV pages: the bf16 plan->run->validate path is untested"
grep -qE "\"kv_dtype\": *\"$plan_kv\"" "$tmp/run.json" &&
  grep -qE "\"kv_grad_dtype\": *\"$plan_grad\"" "$tmp/run.json" && ok ||
  bad "the run of the plan did not record the plan's page dtypes ($plan_kv, $plan_grad)"
# Page dtypes: oomb run stores fp32 pages unless asked (header line), bf16 on request; validate is
# exact on pools, host pools and copies for both, with or without a plan (a plan's page dtypes can
# be overridden and are then predicted as run); other page dtypes are refused by flag.
small=(--model tiny --context 4K --chunk 1K --page 64 --resident-layers 1 --quiet)
expect_exit 0 "pages: KV fp32, KV-grad fp32" run "${small[@]}" --trace "$tmp/run32.json"
expect_exit 0 "pages: KV bf16, KV-grad bf16" run "${small[@]}" --kv-dtype bf16 --kv-grad-dtype bf16 --trace "$tmp/run16.json"
expect_exit 0 "pages: KV bf16, KV-grad fp32" run "${small[@]}" --kv-dtype bf16 --trace "$tmp/run16k.json"
for t in run32 run16 run16k; do
  vout=$("$oomb" validate --trace "$tmp/$t.json" 2>&1)
  for row in "OK: every comparable term" "device_pool_bytes .* 0\.0% .* ok" "host_pool_bytes .* 0\.0% .* ok" \
             "h2d_bytes .* 0\.0% .* ok" "d2h_bytes .* 0\.0% .* ok" "pool_pages .* ok"; do
    grep -qE -- "$row" <<<"$vout" && ok || bad "validate of $t lacks /$row/: $vout"
  done
done
grep -qE '"kv_dtype": *"bf16"' "$tmp/run16.json" && grep -qE '"kv_grad_dtype": *"bf16"' "$tmp/run16.json" && ok ||
  bad "the bf16 run's trace does not record bf16 page dtypes"
grep -qE '"kv_dtype": *"bf16"' "$tmp/run32.json" && bad "the default run's trace records bf16 pages" || ok
expect_exit 0 "pages as run \(KV bf16, KV-grad bf16\)" validate --trace "$tmp/run16.json"
expect_exit 0 "pages: KV fp32, KV-grad fp32" run --plan "$tmp/p.json" --kv-dtype fp32 --kv-grad-dtype fp32 --quiet --trace "$tmp/run_plan32.json"
expect_exit 0 "the run stored KV pages as fp32 .*predicted as run" validate --plan "$tmp/p.json" --trace "$tmp/run_plan32.json"
expect_exit 0 "OK: every comparable term" validate --plan "$tmp/p.json" --trace "$tmp/run_plan32.json"
expect_exit 2 "--kv-dtype.*fp8.*fp32 or bf16" run --model tiny --context 1K --chunk 512 --kv-dtype fp8
expect_exit 2 "--kv-grad-dtype.*fp16.*fp32 or bf16" run --model tiny --context 1K --chunk 512 --kv-grad-dtype fp16
expect_exit 0 "--kv-dtype.*Default for oomb run: fp32" run --help
# --attention-kernel (auto|fp32|bf16-tc) chooses the cuda backend's attention kernels: documented,
# an unknown value or a cpu run is refused by flag name, and bf16-tc is refused up front (before any
# device is looked for) for a model whose head_dim has no tensor-core kernel. Both backends store bf16
# pages; a cuda run with them needs a GPU (tests/gpu/run.sh runs one end to end).
expect_exit 0 "--attention-kernel.*auto.*fp32.*bf16-tc" run --help
expect_exit 2 "--attention-kernel.*fast.*auto, fp32 or bf16-tc" run --model tiny --context 1K --chunk 512 --attention-kernel fast
expect_exit 2 "--attention-kernel.*cuda backend.*cpu run" run --model tiny --context 1K --chunk 512 --attention-kernel fp32
if "$oomb" --version | grep -q "cuda=yes"; then
  expect_exit 2 "--attention-kernel.*bf16-tc.*head_dim 64 or 128.*head_dim 16" run --model tiny --context 1K --chunk 512 \
    --backend cuda --attention-kernel bf16-tc --kv-dtype bf16
fi
# --gemm-precision (fp32|tf32|bf16) chooses the cuda backend's GEMM precision: documented with its
# default (bf16 for oomb run), an unknown value or a cpu run is refused by flag name.
expect_exit 0 "--gemm-precision.*bf16 \(default for oomb run" run --help
expect_exit 0 "--gemm-precision.*tf32.*fp32 \(the reference" run --help
expect_exit 2 "--gemm-precision.*fp16.*fp32, tf32 or bf16" run --model tiny --context 1K --chunk 512 --gemm-precision fp16
expect_exit 2 "--gemm-precision.*cuda backend.*cpu run" run --model tiny --context 1K --chunk 512 --gemm-precision bf16
# A CUPTI-timed trace (source cuda-cupti) through validate, without a GPU: oomb_cupti_synth runs the
# plan's step on the CPU backend behind a CUPTI stand-in (the driver's real tags, the real decoder,
# one untagged kernel). Its times are CPU times, so the time tolerances are opened: what is checked
# is that the time rows are compared (ok, not n/a), pools and copies exactly, and the untagged row.
if [ -x "$synth" ]; then
  "$synth" "$tmp/p.json" "$tmp/cupti.json" >/dev/null || bad "oomb_cupti_synth failed"
  grep -qE '"source": *"cuda-cupti"' "$tmp/cupti.json" && ok || bad "synthetic trace is not cuda-cupti"
  loose=(--tolerance step_s=1e9 --tolerance time:stage1=1e9 --tolerance time:stage2=1e9)
  expect_exit 0 "OK: every comparable term" validate --plan "$tmp/p.json" --trace "$tmp/cupti.json" "${loose[@]}" \
    --report "$tmp/vc.html"
  grep -q "<svg" "$tmp/vc.html" && ok || bad "validate --report of a cuda-cupti trace wrote no SVG"
  vout=$("$oomb" validate --plan "$tmp/p.json" --trace "$tmp/cupti.json" "${loose[@]}" 2>&1)
  for row in "step_s .* ok" "time:stage1 .* ok" "time:stage2 .* ok" "time:op/layer_fwd .* info" \
             "time:op/layer_bwd .* info" "time:op/untagged .* info" "pool_pages .* ok" "h2d_bytes .* ok" \
             "d2h_bytes .* ok" "device_pool_bytes .* ok" "host_pool_bytes .* ok" "note: .*CUPTI device times" \
             "note: cuda backend: .*fp32"; do
    grep -qE -- "$row" <<<"$vout" && ok || bad "validate of a cuda-cupti trace lacks /$row/: $vout"
  done
  # The same trace marked host-timed ("cuda") is not compared in time.
  sed -E 's/"source": *"cuda-cupti"/"source":"cuda"/' "$tmp/cupti.json" >"$tmp/cuda_host.json"
  expect_exit 0 "step_s .* n/a .*host-timed" validate --plan "$tmp/p.json" --trace "$tmp/cuda_host.json"
else
  echo "note: no $synth: the cuda-cupti validate checks are skipped"
fi

# --trace-timing: cupti only for cuda builds with CUPTI, only with --trace; stated in --help.
expect_exit 0 "--trace-timing.*cupti.*host" run --help
expect_exit 2 "--trace-timing.*host or cupti" run --model tiny --context 1K --chunk 512 --trace "$tmp/x.json" --trace-timing fast
expect_exit 2 "--trace-timing.*--trace" run --model tiny --context 1K --chunk 512 --trace-timing host
expect_exit 2 "--trace-timing.*cpu run is timed on the host" run --model tiny --context 1K --chunk 512 --trace "$tmp/x.json" --trace-timing cupti
[ ! -e "$tmp/x.json" ] && ok || bad "a trace was written despite the --trace-timing error"
expect_exit 0 "host wall-clock times" run --model tiny --context 1K --chunk 512 --trace "$tmp/x.json" --trace-timing host --quiet

expect_exit 2 "--plan.*fixes the context" run --plan "$tmp/p.json" --context 8K
expect_exit 2 "--context" run --model tiny --context 0
# Without a GPU the cuda backend is a clear error (or, in a build without it, says so).
if ! nvidia-smi >/dev/null 2>&1; then
  expect_exit 2 "cuda" run --model tiny --context 1K --chunk 512 --backend cuda
fi
expect_exit 2 "--backend.*cpu or cuda" run --model tiny --context 1K --backend tpu
# calibrate: micro-benchmarks of cuda need a device (or a CUDA build); an unknown backend is named.
if ! nvidia-smi >/dev/null 2>&1; then
  expect_exit 2 "--backend.*cuda" calibrate --backend cuda --out "$tmp/never_cuda.json"
fi
expect_exit 2 "--backend.*tpu.*cpu or cuda" calibrate --backend tpu --out "$tmp/never_tpu.json"
[ -e "$tmp/never_cuda.json" ] || [ -e "$tmp/never_tpu.json" ] && bad "a refused calibrate wrote a profile" || ok
# A sparse run with bounded selection memory (the default): the executor reads page summaries in
# place, so validate predicts its copies without their streaming, says so, and the bytes are exact.
"$oomb" run --model tiny --context 2K --chunk 512 --page 64 --attention sparse --budget 4 --quiet \
  --trace "$tmp/sparse_bounded.json" >/dev/null 2>&1 || bad "sparse run for validate"
expect_exit 0 "h2d_bytes .* 0\.0% .*without the page summaries' streaming" validate --trace "$tmp/sparse_bounded.json"

# Sparse recall: measured per (chunk, layer), collected into a budget-to-recall curve, used by the planner.
for b in 4 8 16; do
  "$oomb" run --model tiny --context 2K --chunk 512 --page 64 --attention sparse --budget $b --measure-recall --json \
    --quiet --trace "$tmp/recall$b.json" >"$tmp/recall$b.out" || bad "run --measure-recall --budget $b failed"
done
grep -qE '"mean_recall": 0\.[0-9]' "$tmp/recall4.out" && grep -q '"min_recall"' "$tmp/recall4.out" && ok ||
  bad "run --measure-recall --json lacks mean_recall/min_recall"
grep -q '"recall":' "$tmp/recall4.json" && ok || bad "trace lacks measured recall"
expect_exit 0 "max gradient rel. L2 error" run --model tiny --context 2K --chunk 512 --page 64 --attention sparse --budget 4 --compare-dense --quiet
expect_exit 2 "--measure-recall" run --model tiny --context 2K --chunk 512 --measure-recall
expect_exit 0 "recall curve of tiny from 3" calibrate --recall "$tmp/recall16.json" "$tmp/recall4.json" "$tmp/recall8.json" --out "$tmp/curve.json"
grep -q '"oomb.recall/1"' "$tmp/curve.json" && ok || bad "recall curve lacks schema"
expect_exit 2 "run.json.*dense" calibrate --recall "$tmp/run.json" --out "$tmp/never_curve.json"
expect_exit 0 "recall +mean 0\.[0-9]+ .*budgets >= [0-9]+ pages" plan --model tiny --gpu h200 --context 2K --attention sparse --min-recall 0.5 --recall-curve "$tmp/curve.json"
expect_exit 2 "--min-recall.*no budget reaches" plan --model tiny --gpu h200 --context 2K --allow-sparse --min-recall 0.9999 --recall-curve "$tmp/curve.json"
expect_exit 2 "--min-recall.*--recall-curve" plan --model tiny --gpu h200 --context 2K --allow-sparse --min-recall 0.5

# Hugging Face config.json as --model (Qwen/Qwen2.5-7B's published config): the same plan as the
# catalog id, with ids typed as people type them.
mkdir -p "$tmp/Qwen2.5-7B"
cat >"$tmp/Qwen2.5-7B/config.json" <<'JSON'
{"architectures": ["Qwen2ForCausalLM"], "hidden_act": "silu", "hidden_size": 3584, "intermediate_size": 18944,
 "max_position_embeddings": 131072, "max_window_layers": 28, "model_type": "qwen2", "num_attention_heads": 28,
 "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
 "sliding_window": 131072, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_sliding_window": false,
 "vocab_size": 152064}
JSON
"$oomb" plan --model "$tmp/Qwen2.5-7B/config.json" --gpu H200 --context 4M --out "$tmp/hf_plan.json" >"$tmp/hf_plan.out" 2>&1 || bad "plan --model config.json failed: $(cat "$tmp/hf_plan.out")"
"$oomb" plan --model qwen2.5-7b --gpu h200 --context 4M --out "$tmp/id_plan.json" >"$tmp/id_plan.out" 2>&1 || bad "plan --model qwen2.5-7b failed"
# Identical but for the planner's own timing line, the output path and the spec's provenance.
if diff <(grep -v -e searched -e "Plan written" "$tmp/hf_plan.out") <(grep -v -e searched -e "Plan written" "$tmp/id_plan.out") >/dev/null &&
   diff <(grep -v '"source"' "$tmp/hf_plan.json") <(grep -v '"source"' "$tmp/id_plan.json") >/dev/null; then ok; else
  bad "plan from config.json differs from plan from qwen2.5-7b"; fi
grep -q 'Hugging Face config' "$tmp/hf_plan.json" && ok || bad "plan from config.json does not name its source"
expect_exit 0 "qwen2.5-7b on h200" simulate --model "$tmp/Qwen2.5-7B" --gpu h200 --context 1M
expect_exit 0 "qwen2.5-7b on h100-sxm" simulate --model Qwen2.5-7B-Instruct --gpu h100 --context 1M
expect_exit 0 "wrote .*my-model.json .*id qwen2.5-7b" models --import "$tmp/Qwen2.5-7B/config.json" --out "$tmp/my-model.json"
grep -q '"schema": "oomb.model/1"' "$tmp/my-model.json" && grep -q 'Qwen2.5-7B/config.json' "$tmp/my-model.json" && ok ||
  bad "models --import wrote no oomb.model/1 naming its source"
expect_exit 0 "qwen2.5-7b on h200" simulate --model "$tmp/my-model.json" --gpu h200 --context 1M
expect_exit 2 "--out.*--import" models --out "$tmp/never.json"
sed 's/"vocab_size"/"num_local_experts": 8, "vocab_size"/' "$tmp/Qwen2.5-7B/config.json" >"$tmp/qwen-experts.json"
expect_exit 2 "Qwen2ForCausalLM is not supported: it has num_local_experts" plan --model "$tmp/qwen-experts.json" --gpu h200 --context 1M
# A mixture of experts (Mixtral's published config) is read and planned (its weights and gradients
# do not fit one H200 in full: LoRA on the attention with the experts frozen does); it runs, so a
# CPU run is refused for the host memory its 46.7B parameters need, not by name.
# gpt-oss-20b (MXFP4 experts, YaRN; its biases, clamped SwiGLU, sliding layers and sinks run) is refused by name. Its plan at
# 4M keeps its sliding layers' reach only (local_kv_pool).
expect_exit 1 "LoRA rank 16 on the attention, the experts frozen.*--lora-rank 16" \
  plan --model "$src/tests/models/hf_configs/mixtral-8x7b.json" --gpu h200 --context 1M
expect_exit 2 "--context: '1K': this run needs at least .* of host memory" \
  run --model "$src/tests/models/hf_configs/mixtral-8x7b.json" --context 1K --chunk 256 --page 64
expect_exit 2 "--model: 'gpt-oss-20b': experts stored as mxfp4 is planned, not run" \
  run --model gpt-oss-20b --context 1K --chunk 256 --page 64
# tiny-moe (Qwen3-MoE-shaped, 8 experts, top 2) runs: its chunk-recurrent step is the full-sequence
# reference's, plan -> run -> validate holds its memory to the byte (bf16 storage, the plan's
# default; the CUDA backend's run: tests/cli/emulated_runs.sh), and a plan with data parallelism
# says it is on paper and why.
expect_exit 0 "reference \(full sequence\): loss .* max gradient rel. L2 error [0-9.]+e-(0[6-9]|[1-9][0-9])" \
  run --model tiny-moe --context 256 --chunk 64 --page 16 --resident-layers 1 --reference --quiet
expect_exit 0 "Plan written" plan --model tiny-moe --gpu h200 --context 1K --chunk 256 --page 32 --resident-layers 1 \
  --out "$tmp/moe-plan.json"
expect_exit 0 "copies per step" run --plan "$tmp/moe-plan.json" --trace "$tmp/moe-run.json" --quiet
expect_exit 0 "OK: every comparable term" validate --plan "$tmp/moe-plan.json" --trace "$tmp/moe-run.json"
expect_exit 0 "NOT EXECUTABLE: a mixture of experts under data parallelism is planned on paper" \
  plan --model tiny-moe --gpu h200 --context 1K --data-parallel 2
expect_exit 0 "tiny-moe .* 8 x top-2$" models
# A model file's step against the full-sequence reference, then its plan run and traced
# ($tmp/$2-plan.json, $tmp/$2-run.json) for validate.
reference_plan_run() {
  expect_exit 0 "reference \(full sequence\): loss .* max gradient rel. L2 error [0-9.]+e-(0[6-9]|[1-9][0-9])" \
    run --model "$1" --context 256 --chunk 64 --page 16 --resident-layers 1 --reference --quiet
  expect_exit 0 "Plan written" plan --model "$1" --gpu h200 --context 1K --chunk 256 --page 32 --resident-layers 1 \
    --out "$tmp/$2-plan.json"
  expect_exit 0 "copies per step" run --plan "$tmp/$2-plan.json" --trace "$tmp/$2-run.json" --quiet
}
# Gemma's sandwich norms and GeGLU MLP run on a dense model read from a file: the reference's step,
# and plan -> run -> validate holds their rows (the sublayers' outputs and rstd) to the byte.
sed -e 's/"id": "tiny"/"id": "tiny-sandwich"/' -e 's/"qkv_bias": true,/"qkv_bias": true, "sandwich_norms": true, "mlp": "geglu_tanh",/' \
  "$src/models/llm/tiny.json" > "$tmp/tiny-sandwich.json"
reference_plan_run "$tmp/tiny-sandwich.json" sandwich
expect_exit 0 "OK: every comparable term" validate --plan "$tmp/sandwich-plan.json" --trace "$tmp/sandwich-run.json"
# Shared experts (a dense MLP every token uses beside the routed ones) run, in a model read from a
# file: the reference's step, and plan -> run -> validate at 0.0% with the spec the trace records
# (validate needs no model file: the run record carries the spec that ran).
sed -e 's/"id": "tiny-moe"/"id": "tiny-moe-shared"/' \
    -e 's/"experts_per_token": 2,/"experts_per_token": 2, "shared_experts": 1, "shared_ffn_hidden": 48,/' \
  "$src/models/llm/tiny-moe.json" > "$tmp/tiny-moe-shared.json"
reference_plan_run "$tmp/tiny-moe-shared.json" shared
mv "$tmp/tiny-moe-shared.json" "$tmp/tiny-moe-shared.moved"
expect_exit 0 "OK: every comparable term" validate --plan "$tmp/shared-plan.json" --trace "$tmp/shared-run.json"
# The load-balancing auxiliary loss: the reference's from its definition, a plan carrying it (its
# statistics row) validated at 0.0%, and refused by name for a dense model.
expect_exit 0 "reference \(full sequence\): loss .* max gradient rel. L2 error [0-9.]+e-(0[6-9]|[1-9][0-9])" \
  run --model tiny-moe --context 256 --chunk 64 --page 16 --resident-layers 1 --router-aux-loss 0.02 --reference --quiet
expect_exit 0 "router_aux_statistics" plan --model tiny-moe --gpu h200 --context 1K --chunk 256 --page 32 \
  --resident-layers 1 --router-aux-loss 0.001 --out "$tmp/aux-plan.json"
expect_exit 0 "copies per step" run --plan "$tmp/aux-plan.json" --trace "$tmp/aux-run.json" --quiet
expect_exit 0 "OK: every comparable term" validate --plan "$tmp/aux-plan.json" --trace "$tmp/aux-run.json"
expect_exit 2 "--router-aux-loss: .*tiny has no experts" plan --model tiny --gpu h200 --context 1K --router-aux-loss 0.01
# Local layers (tiny-local: sliding 100, chunked 192, global, sliding) and attention sinks beside
# sliding layers (tiny-sinks) run: the full-sequence reference's step, the local pools reported, and
# plan -> run -> validate holds their memory to the byte; their plans are executable.
expect_exit 0 "local pools \(sliding and chunked layers\): KV 38 / 38 pages, KV-grad 20 / 20 pages" \
  run --model tiny-local --context 1K --chunk 256 --page 32 --resident-layers 1 --quiet
for m in tiny-local tiny-sinks; do
  expect_exit 0 "reference \(full sequence\): loss .* max gradient rel. L2 error [0-9.]+e-(0[6-9]|[1-9][0-9])" \
    run --model $m --context 640 --chunk 128 --page 32 --resident-layers 1 --reference --quiet
  expect_exit 0 "Plan written" plan --model $m --gpu h200 --context 2K --chunk 512 --page 64 --resident-layers 1 \
    --out "$tmp/$m-plan.json"
  if grep -q "NOT EXECUTABLE" <("$oomb" plan --model $m --gpu h200 --context 2K --chunk 512 --page 64 2>&1); then
    bad "$m: its plan says it is not executable"; else ok; fi
  expect_exit 0 "copies per step" run --plan "$tmp/$m-plan.json" --trace "$tmp/$m-run.json" --quiet
  expect_exit 0 "OK: every comparable term" validate --plan "$tmp/$m-plan.json" --trace "$tmp/$m-run.json"
done
expect_exit 0 "NOT EXECUTABLE: attention sinks under tensor parallelism are planned on paper" \
  plan --model tiny-sinks --gpu h200 --context 1K --gpus 2
expect_exit 0 "\"local_kv_pool\"" plan --model gpt-oss-20b --gpu h200 --context 4M --json
expect_exit 0 "Device memory" plan --model qwen3-30b-a3b --gpu h200 --context 1M
expect_exit 0 "expert_weights  .*GiB" plan --model gpt-oss-120b --gpu h200 --context 1M --lora-rank 16
# Qwen3 (q/k norm) is planned, simulated and executed (a tiny model with the norms: the chunked run
# against the full-sequence reference).
expect_exit 0 "qwen3-8b on h200" simulate --model Qwen3-8B --gpu h200 --context 1M
"$oomb" models --show tiny | sed 's/"id": "tiny"/"id": "tiny-qk", "qk_norm": true/' >"$tmp/tiny-qk.json"
expect_exit 0 "reference \(full sequence\)" run --model "$tmp/tiny-qk.json" --context 512 --chunk 256 --page 64 --reference --quiet

# Hugging Face checkpoints: --save-weights writes shards + index above --max-shard-bytes, --weights
# reads the folder back (same loss as the seeded weights it saved); bf16 shards (converted here
# when python3 is present) run too.
"$oomb" run --model tiny --context 1K --chunk 256 --page 64 >"$tmp/ck_ref.out" 2>&1 || bad "run tiny failed"
expect_exit 0 "weights: .*model.safetensors.index.json \(index of [0-9]+ shards\)" run --model tiny --context 1K --chunk 256 --page 64 --save-weights "$tmp/ck" --max-shard-bytes 100000
[ -f "$tmp/ck/model-00001-of-00005.safetensors" ] && ok || bad "--save-weights wrote no shards: $(ls "$tmp/ck")"
"$oomb" run --model tiny --context 1K --chunk 256 --page 64 --weights "$tmp/ck" >"$tmp/ck_run.out" 2>&1 || bad "run --weights DIR failed: $(cat "$tmp/ck_run.out")"
[ "$(grep -o 'loss [0-9.]*' "$tmp/ck_ref.out")" = "$(grep -o 'loss [0-9.]*' "$tmp/ck_run.out")" ] && ok ||
  bad "run --weights DIR gave another loss than the weights it saved"
expect_exit 2 "--max-shard-bytes" run --model tiny --context 1K --chunk 256 --page 64 --save-weights "$tmp/never_ck" --max-shard-bytes 0
[ ! -e "$tmp/never_ck" ] && ok || bad "a checkpoint was written despite --max-shard-bytes 0"
expect_exit 2 "weight_map|missing" run --model tiny --context 1K --chunk 256 --page 64 --weights "$tmp/Qwen2.5-7B/config.json"
if command -v python3 >/dev/null; then
  mkdir -p "$tmp/ck_bf16"
  python3 - "$tmp/ck" "$tmp/ck_bf16" <<'PY' || bad "bf16 conversion failed"
import json, os, struct, sys
src, dst = sys.argv[1], sys.argv[2]
index = json.load(open(os.path.join(src, "model.safetensors.index.json")))
for shard in sorted(set(index["weight_map"].values())):
    raw = open(os.path.join(src, shard), "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    out_header, out = {}, bytearray()
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        vals = struct.unpack("<%dI" % ((end - b) // 4), data[b:end])
        start = len(out)
        for u in vals:  # fp32 -> bf16, round to nearest even
            out += struct.pack("<H", ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF)
        out_header[name] = {"dtype": "BF16", "shape": e["shape"], "data_offsets": [start, len(out)]}
    text = json.dumps(out_header).encode()
    open(os.path.join(dst, shard), "wb").write(struct.pack("<Q", len(text)) + text + bytes(out))
index["metadata"]["total_size"] //= 2
json.dump(index, open(os.path.join(dst, "model.safetensors.index.json"), "w"))
PY
  expect_exit 0 "step 1 +loss [0-9]" run --model tiny --context 1K --chunk 256 --page 64 --weights "$tmp/ck_bf16"
fi

# Run logs as measurements: steps "measured" on a known profile (the h200 with other efficiencies)
# are fitted back to it by `calibrate --points`, CSV and JSON (a plan as a point), with per-point
# and left-out errors; `validate --measured` compares a plan with outside numbers.
"$oomb" models --show h200 | sed 's/"attention": 0.5/"attention": 0.45/; s/"attention_backward": 0.5/"attention_backward": 0.33/; s/"gemm": 0.7/"gemm": 0.62/; s/"memory_bound": 0.8/"memory_bound": 0.55/; s/"launch_overhead_s": 5e-06/"launch_overhead_s": 7e-06/; s/"id": "h200"/"id": "h200-truth"/' >"$tmp/truth.json"
echo "name,model,context,chunk,schedule,checkpointing,resident_layers,step_s,peak_device_bytes" >"$tmp/points.csv"
i=0
while IFS=, read -r m c ch sc ck r; do
  i=$((i + 1))
  j=$("$oomb" simulate --gpu "$tmp/truth.json" --model "$m" --context "$c" --chunk "$ch" --schedule "$sc" --checkpointing "$ck" --resident-layers "$r" --json)
  st=$(grep -m1 '"step_s"' <<<"$j" | sed 's/.*: //; s/,//')
  pk=$(grep -m1 '"peak_device_bytes"' <<<"$j" | sed 's/.*: //; s/,//')
  echo "run $i,$m,$c,$ch,$sc,$ck,$r,$st,$pk" >>"$tmp/points.csv"
done <<'ROWS'
qwen2.5-7b,256K,4K,oomb,true,1
qwen2.5-7b,64K,2K,oomb,true,all
qwen2.5-7b,32K,4K,oomb,false,all
qwen2.5-7b,1M,8K,oomb,true,2
qwen2.5-0.5b,128K,1K,oomb,true,all
qwen2.5-0.5b,16K,512,oomb,true,2
qwen2.5-0.5b,8K,256,oomb,false,all
qwen2.5-1.5b,32K,4K,standard,true,all
qwen2.5-1.5b,8K,4K,standard,false,all
llama-3.1-8b,512K,8K,oomb,true,2
ROWS
expect_exit 0 "efficiency gemm 0.6200, attention 0.4500 \(backward 0.3300\), memory-bound 0.5500; launch overhead 7.0 us" calibrate --points "$tmp/points.csv" --gpu h200 --out "$tmp/points-fit.json"
expect_exit 0 "run 10 .* 0.0% .* 0.0%" calibrate --points "$tmp/points.csv" --gpu h200
grep -q '"left_out_step_error"' "$tmp/points-fit.json" && grep -q '"calibrated_from": "least-squares fit to 10 measured step' "$tmp/points-fit.json" && ok ||
  bad "calibrate --points wrote no per-point / left-out errors"
# JSON points, one of them a plan (paths relative to the points file), tokens_per_s instead of step_s.
"$oomb" plan --model qwen2.5-7b --gpu h200 --context 256K --chunk 4K --resident-layers 1 --out "$tmp/pt_plan.json" >/dev/null || bad "plan for points failed"
st=$("$oomb" simulate --gpu "$tmp/truth.json" --model qwen2.5-0.5b --context 32K --chunk 2K --json | grep -m1 '"step_s"' | sed 's/.*: //; s/,//')
cat >"$tmp/points.json" <<JSON
{"schema": "oomb.points/1", "points": [
  {"name": "from a plan", "plan": "pt_plan.json", "step_s": 300},
  {"model": "Qwen2.5-0.5B", "context": "32K", "chunk": "2K", "tokens_per_s": $(awk "BEGIN{printf \"%.6f\", 32768 / $st}")}]}
JSON
expect_exit 0 "from a plan .* point 2|from a plan" calibrate --points "$tmp/points.json" "$tmp/points.csv" --gpu h200
printf 'model,context,stepp\ntiny,4K,1\n' >"$tmp/badkey.csv"
expect_exit 2 "badkey.csv line 2.*stepp.*unknown key" calibrate --points "$tmp/badkey.csv" --gpu h200
printf 'model,context,step_s\ntiny,4K,\n' >"$tmp/nostep.csv"
expect_exit 2 "nostep.csv line 2.*step_s.*missing" calibrate --points "$tmp/nostep.csv" --gpu h200
printf 'model,context,chunk,step_s,tokens_per_s\ntiny,4K,1K,1,99\n' >"$tmp/disagree.csv"
expect_exit 2 "tokens_per_s.*disagrees with step_s" calibrate --points "$tmp/disagree.csv" --gpu h200
printf 'model,gpu,context,chunk,step_s\ntiny,a100-40gb,4K,1K,1\n' >"$tmp/othergpu.csv"
expect_exit 2 "othergpu.csv line 2.*gpu.*not the fitted profile" calibrate --points "$tmp/othergpu.csv" --gpu h200
printf 'model,context,chunk,step_s\ntiny,4K,1000,1\n' >"$tmp/badchunk.csv"
expect_exit 2 "badchunk.csv line 2.*--chunk" calibrate --points "$tmp/badchunk.csv" --gpu h200
head -2 "$tmp/points.csv" >"$tmp/one.csv"
expect_exit 2 "is not determined" calibrate --points "$tmp/one.csv" --gpu h200
expect_exit 0 "efficiency gemm 0.6200" calibrate --points "$tmp/one.csv" --gpu "$tmp/truth.json" --hold attention attention_backward memory_bound launch_overhead
expect_exit 2 "--gpu.*required with --points" calibrate --points "$tmp/points.csv"
pst=$("$oomb" simulate --plan "$tmp/pt_plan.json" --json | grep -m1 '"step_s"' | sed 's/.*: //; s/,//')
expect_exit 0 "step_s .* ok" validate --plan "$tmp/pt_plan.json" --measured "step_s=$pst"
expect_exit 1 "step_s .*FAIL" validate --plan "$tmp/pt_plan.json" --measured "step_s=$(awk "BEGIN{print $pst * 2}"),peak_device_bytes=1000"
expect_exit 2 "--measured.*unknown term" validate --plan "$tmp/pt_plan.json" --measured "stepp=3"
expect_exit 2 "--measured.*not a positive number" validate --plan "$tmp/pt_plan.json" --measured "step_s=-1"
expect_exit 2 "--measured.*--plan" validate --measured "step_s=3"
expect_exit 2 "--trace.*required" validate --plan "$tmp/pt_plan.json"

# Ids and commands as typed: did you mean, unknown subcommands, completion scripts.
expect_exit 2 "did you mean qwen2.5-7b" plan --model qwen2.5-7 --gpu h200 --context 1M
expect_exit 2 "did you mean h200" plan --model qwen2.5-7b --gpu h2000 --context 1M
expect_exit 2 "unknown subcommand 'plann' \(did you mean plan\?\)" plann --context 1M
expect_exit 2 "unknown subcommand 'frobnicate'.*subcommands: .*plan" frobnicate
expect_exit 2 "--contxt: unknown flag of .oomb plan. \(did you mean --context\?\)" plan --model qwen2.5-7b --contxt 4M
expect_exit 2 "--weight: unknown flag of .oomb run. \(did you mean --weights\?\)" run --model tiny --context 1K --weight x
expect_exit 2 "completion.*bash or zsh" completion fish
"$oomb" completion bash >"$tmp/oomb.bash" && bash -n "$tmp/oomb.bash" && ok || bad "completion bash is not valid bash"
# Completing in a real bash: subcommands, a subcommand's flags, catalog ids after --model / --gpu.
complete_words() { bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _oomb; echo "${COMPREPLY[*]}"' _ "$tmp/oomb.bash" "$@"; }
[[ " $(complete_words oomb pl) " == *" plan "* ]] && ok || bad "bash completion of 'oomb pl' lacks plan"
[[ " $(complete_words oomb plan --cont) " == *" --context "* ]] && ok || bad "bash completion lacks plan --context"
[[ " $(complete_words oomb run --weig) " == *" --weights "* ]] && ok || bad "bash completion lacks run --weights"
[[ " $(complete_words oomb plan --model qwen2.5-7) " == *" qwen2.5-7b "* ]] && ok || bad "bash completion lacks model ids"
[[ " $(complete_words oomb simulate --gpu h2) " == *" h200 "* ]] && ok || bad "bash completion lacks gpu ids"
"$oomb" completion zsh >"$tmp/_oomb" && grep -q '^#compdef oomb' "$tmp/_oomb" && grep -q -- '--context' "$tmp/_oomb" && ok ||
  bad "completion zsh lacks #compdef or flags"
if command -v zsh >/dev/null; then
  zsh -n "$tmp/_oomb" && ok || bad "completion zsh is not valid zsh"
  # _oomb with zsh's completion builtins stubbed to print what they would offer.
  cat >"$tmp/zsh_stub.zsh" <<'ZSH'
_describe() { print -r -- "describe ${(P)2}"; }
compadd() { shift; print -r -- "compadd $*"; }
_alternative() { print -r -- "alternative $*"; }
_files() { print -r -- "files"; }
compdef() { :; }
source "$1"; shift
words=("$@"); CURRENT=${#words}
_oomb
ZSH
  zcomplete() { zsh -f "$tmp/zsh_stub.zsh" "$tmp/_oomb" "$@"; }
  [[ "$(zcomplete oomb pl)" == *"plan:"* ]] && ok || bad "zsh completion of 'oomb pl' lacks plan"
  [[ " $(zcomplete oomb plan --cont) " == *" --context "* ]] && ok || bad "zsh completion lacks plan --context"
  [[ "$(zcomplete oomb plan --model qw)" == *"qwen2.5-7b"* ]] && ok || bad "zsh completion lacks model ids"
fi

echo "cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
