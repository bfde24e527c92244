#!/usr/bin/env bash
# Whole runs of the CUDA backend on the emulated device (issue 42, point 3): for each tiny plan,
# `oomb run --plan p.json --backend cuda --trace t.json` on the emulated device, then
#   - its losses equal the CPU backend's on the same plan within the bf16-GEMM bound of
#     tests/cuda/engine_test.cpp (kBf16GemmLossRelTol, 1e-3 relative: the CUDA run's GEMMs round
#     their operands to bf16, the CPU's are fp32);
#   - the CUPTI trace says it was measured on the emulated device (measured.emulated_device), has
#     every record tagged and none dropped;
#   - `oomb validate --plan p.json --trace t.json` passes: the memory terms (device rows, pools, host
#     pages: the table's bytes, to the byte), the copy bytes and the order of the work (the passes in
#     the simulator's order, every page copy within its pass) are judged, the times are not.
# The plans cover dense, offload, sparse, bf16 KV, LoRA, partial checkpointing, the optimizer on the
# GPU and on the host, a mixture of experts, and (under mpirun, with the emulated NCCL) tensor parallel 2 and data
# parallel 2 with ZeRO-1 (-np 2), and both at once (-np 4: NCCL's buffers against their row), and a
# two-rank job whose rank 1 faults mid-step (it must end, non-zero, naming the fault).
# Usage: emulated_runs.sh path/to/oomb-emulated path/to/oomb   (the second: any build, for the plans
# and the CPU runs; the same binary with OOMB_CUDA=EMULATED). ONLY_MPI=1: the two-rank cases only.
# On a GPU (tests/gpu/run.sh, issue 42 part 5): the first binary is an nvcc build (`cuda=yes`), and
# the same plans run on the device, so the first GPU hour compares against runs CI has passed. There
# the trace must not say emulated, the memory terms must still be exact, and validate's verdict on
# the times is printed as a finding, not a failure of this script (the plans are for --gpu
# OOMB_RUNS_GPU, default h200; tiny steps are launch-bound, far from any roofline); the switches
# only the emulated device has (dropped CUPTI records, no bf16 GEMM) are skipped, and the two-rank
# cases need NCCL and two GPUs.
set -u
emu=$1
cpu=${2:-$1}
gpu_profile=${OOMB_RUNS_GPU:-h200}
mode=emulated
"$emu" --version | grep -q "cuda=yes" && mode=gpu
echo "mode: $mode ($("$emu" --version | tail -n 1))"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

# The losses of a `run --json` output, one per line.
losses() { tr -d '\n ' <"$1" | grep -o '"losses":\[[^]]*\]' | head -1 | sed 's/.*\[//; s/\]//' | tr ',' '\n'; }

# Ranks: `mpirun -np N` of both binaries when the plan has several (the CUDA run's NCCL is the
# emulated one: the ranks meet in shared memory), else nothing.
launch=""
have_mpi=0
nccl_word=emulated
[ "$mode" = gpu ] && nccl_word=yes
if command -v mpirun >/dev/null 2>&1 && "$emu" --version | grep -q "mpi=yes" && "$emu" --version | grep -q "nccl=$nccl_word" &&
   "$cpu" --version | grep -q "mpi=yes"; then
  have_mpi=1
  # On GPUs: one per rank.
  if [ "$mode" = gpu ] && [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -lt 2 ]; then have_mpi=0; fi
fi
mpirun_np() {
  echo "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 mpirun --oversubscribe -np $1"
}

# case NAME STEPS PLAN-FLAGS...: plan the tiny model (or $MODEL) at 512 tokens (two chunks of 256)
# with the flags, then run and check it ($launch in front of both runs).
case_() {
  local name=$1 steps=$2
  shift 2
  local d="$tmp/$name"
  mkdir -p "$d"
  if ! "$cpu" plan --model "${MODEL:-tiny}" --gpu "$gpu_profile" --context 512 --chunk 256 --page 64 "$@" --out "$d/p.json" >"$d/plan.txt" 2>&1; then
    bad "$name: plan failed: $(tail -3 "$d/plan.txt")"
    return
  fi
  local start=$SECONDS
  if ! $launch "$emu" run --plan "$d/p.json" --backend cuda --steps "$steps" --warmup 0 --trace "$d/t.json" --json \
       >"$d/cuda.json" 2>"$d/cuda.err"; then
    bad "$name: the emulated cuda run failed: $(tail -5 "$d/cuda.err")"
    return
  fi
  if ! $launch "$cpu" run --plan "$d/p.json" --backend cpu --steps "$steps" --warmup 0 --json >"$d/cpu.json" 2>"$d/cpu.err"; then
    bad "$name: the cpu run failed: $(tail -5 "$d/cpu.err")"
    return
  fi
  local cl pl
  cl=$(losses "$d/cuda.json" | tr '\n' ' ')
  pl=$(losses "$d/cpu.json" | tr '\n' ' ')
  if [ -z "$cl" ] || [ "$(wc -w <<<"$cl")" -ne "$steps" ] || [ "$(wc -w <<<"$pl")" -ne "$steps" ]; then
    bad "$name: expected $steps losses, cuda: '$cl', cpu: '$pl'"
  elif ! awk -v a="$cl" -v b="$pl" 'BEGIN { n = split(a, x, " "); split(b, y, " ");
         for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-3 * y[i]) exit 1 } }'; then
    bad "$name: losses differ by more than 1e-3 relative: cuda $cl, cpu $pl"
  else
    pass=$((pass + 1))
  fi
  if [ "$mode" = emulated ] && ! grep -q '"emulated_device": *true' "$d/t.json"; then
    bad "$name: the trace does not say it was measured on the emulated device"
  elif [ "$mode" = gpu ] && grep -q '"emulated_device": *true' "$d/t.json"; then
    bad "$name: a GPU run's trace says it was measured on the emulated device"
  else
    pass=$((pass + 1))
  fi
  if ! grep -q '"source": *"cuda-cupti"' "$d/t.json" || ! grep -q '"untagged": *0' "$d/t.json" ||
     ! grep -q '"dropped_records": *0' "$d/t.json"; then
    bad "$name: not a CUPTI trace with every record tagged and none dropped: $(grep -o '"untagged": *[0-9]*\|"dropped_records": *[0-9]*\|"source": *"[a-z-]*"' "$d/t.json" | tr '\n' ' ')"
  else
    pass=$((pass + 1))
  fi
  "$cpu" validate --plan "$d/p.json" --trace "$d/t.json" >"$d/validate.txt" 2>&1
  local vrc=$?
  if [ "$mode" = gpu ]; then
    # The memory terms are exact on any device; the times are the GPU's finding.
    if [ "$vrc" -gt 1 ] || ! grep -qE "^ *peak_device_bytes .* 0\.0% .* ok" "$d/validate.txt"; then
      bad "$name: validate refused the run or its memory differs: $(grep -E 'FAIL|error|peak_device' "$d/validate.txt" | head -5)"
    else
      pass=$((pass + 1))
      [ "$vrc" -eq 1 ] && echo "finding: $name: validate's time terms on this GPU: $(grep FAIL "$d/validate.txt" | head -5 | tr -s ' ')"
    fi
  elif [ "$vrc" -ne 0 ]; then
    bad "$name: validate failed: $(grep -E 'FAIL|error' "$d/validate.txt" | head -5)"
  elif ! grep -q "not comparable: measured on the emulated CUDA device" "$d/validate.txt" ||
       ! grep -qE "^ *peak_device_bytes .* 0\.0% .* ok" "$d/validate.txt"; then
    bad "$name: validate did not judge memory and leave the emulated times out: $(head -40 "$d/validate.txt")"
  else
    pass=$((pass + 1))
  fi
  echo "$name: cuda $cl/ cpu $pl($((SECONDS - start)) s)"
}

[ -n "${ONLY_MPI:-}" ] || {
case_ dense 1 --kv-dtype fp32 --resident-layers all
case_ offload 1 --resident-layers 1
case_ sparse 1 --attention sparse --budget 2 --resident-layers 1
case_ bf16_kv 1 --kv-dtype bf16 --kv-grad-dtype bf16 --resident-layers all
case_ lora 2 --lora-rank 4 --lora-targets all-linear --optimizer gpu --resident-layers all
case_ kept_layers 1 --kept-layers 1 --resident-layers all
case_ optimizer_gpu 2 --optimizer gpu --resident-layers 1
case_ optimizer_host 2 --optimizer host --resident-layers 1
# A mixture of experts (tiny-moe: 8 experts, top 2, its first layer dense): the routing, gather and
# combine kernels on bf16 rows (the plan's storage), AdamW on the GPU over both weight rows, and on
# the host (the round trip copies both rows back in).
MODEL=tiny-moe case_ moe 2 --optimizer gpu --resident-layers 1
MODEL=tiny-moe case_ moe_optimizer_host 2 --optimizer host --resident-layers 1
# Local layers (tiny-local: sliding, chunked, global, sliding; the window masks of the CUDA-core
# kernels and the local page pools) and attention sinks beside sliding layers (tiny-sinks).
MODEL=tiny-local case_ local_layers 1 --resident-layers 1
MODEL=tiny-sinks case_ sinks 2 --optimizer gpu --resident-layers 1
}
# Two ranks: tensor parallelism over two emulated GPUs, and two data-parallel replicas with ZeRO-1
# (the AdamW state sharded: reduce-scatter and all-gather instead of the all-reduce); then four,
# both at once. Each rank's trace is checked above through rank 0's (validate judges the set).
if [ "$have_mpi" -eq 1 ]; then
  launch=$(mpirun_np 2)
  case_ tensor_parallel_2 1 --gpus 2 --resident-layers 1
  case_ data_parallel_2_zero1 2 --data-parallel 2 --shard-optimizer true --optimizer gpu --resident-layers 1
  # Four ranks: two tensor-parallel groups of two and the replicas across them. The world is only
  # split, so NCCL never connects it: each rank holds its two communicators' buffers, which validate
  # judges against the table's communicator_buffers row (peak:communication, exact here).
  launch=$(mpirun_np 4)
  case_ tensor_x_data_parallel 1 --gpus 2 --data-parallel 2 --resident-layers 1
  d="$tmp/tensor_x_data_parallel"
  if [ "$mode" = emulated ] && [ -f "$d/validate.txt" ]; then
    if grep -qE "^ *peak:communication .* 0\.0% .* ok" "$d/validate.txt"; then
      pass=$((pass + 1))
    else
      bad "tensor_x_data_parallel: NCCL's buffers are not the table's row: $(grep -E 'communication|FAIL' "$d/validate.txt" | head -3)"
    fi
  fi
  launch=""
  # Review 3, finding 6, at the job's level: a rank whose device faults in the middle of a step
  # (OOMB_EMULATED_FAULT_AT_LAUNCH, rank 1 only) ends the job non-zero within seconds, its error
  # naming the step, the pass and the fault, instead of leaving its peer waiting in a collective
  # (the emulated NCCL's own timeout is set far past the bound, so a wait would show).
  d="$tmp/tensor_parallel_2"
  if [ "$mode" = emulated ] && [ -f "$d/p.json" ]; then
    start=$SECONDS
    OOMB_EMULATED_NCCL_TIMEOUT_S=300 timeout 280 $(mpirun_np 1) "$emu" run --plan "$d/p.json" --backend cuda --steps 1 \
      --warmup 0 --trace "$d/t_fault.json" : -np 1 env OOMB_EMULATED_FAULT_AT_LAUNCH=50 "$emu" run --plan "$d/p.json" \
      --backend cuda --steps 1 --warmup 0 --trace "$d/t_fault.json" >"$d/fault.txt" 2>&1
    frc=$?
    took=$((SECONDS - start))
    if [ "$frc" -ne 0 ] && [ "$frc" -ne 124 ] && [ "$took" -lt 120 ] && grep -q "injected fault" "$d/fault.txt" &&
       grep -q "oomb run: step 1 of 1 failed: .*(in stage" "$d/fault.txt"; then
      pass=$((pass + 1))
      echo "a_rank_faults: exit $frc in $took s"
    else
      bad "a_rank_faults: a job whose rank 1 faults did not end promptly and non-zero, naming the fault (exit $frc, $took s): $(grep -E 'failed|fault|ABORT' "$d/fault.txt" | head -5)"
    fi
  fi
  for name in tensor_parallel_2 data_parallel_2_zero1; do
    d="$tmp/$name"
    [ "$mode" = gpu ] && continue  # rank 1's times are judged there; its memory by the case above
    if [ -f "$d/validate.txt" ] && grep -q "rank 1 .*t.rank1.json .*ok" "$d/validate.txt" &&
       grep -q '"emulated_device": *true' "$d/t.rank1.json"; then
      pass=$((pass + 1))
    else
      bad "$name: rank 1's trace was not validated as the emulated device's: $(grep 'rank 1' "$d/validate.txt")"
    fi
  done
else
  echo "skipped: the two-rank cases (need mpirun and binaries built with MPI and the emulated NCCL)"
fi

# A CUPTI that starts but records no kernel (here: every record dropped) gives the host-timed trace,
# saying why, never a device trace without compute.
d="$tmp/dense"
if [ "$mode" = emulated ] && [ -f "$d/p.json" ]; then
  OOMB_EMULATED_CUPTI_DROP_EVERY=1 "$emu" run --plan "$d/p.json" --backend cuda --steps 1 --warmup 0 \
    --trace "$d/t0.json" >"$d/no_kernel.txt" 2>&1
  if grep -q "CUPTI gave no device times (it started but recorded no kernel" "$d/no_kernel.txt" &&
     grep -q '"trace_timing": *"host"' "$d/t0.json" && grep -q '"cupti_unavailable": *"it started but recorded no kernel' "$d/t0.json"; then
    pass=$((pass + 1))
  else
    bad "no_kernel: a CUPTI with every record dropped did not fall back to the host-timed trace: $(tail -5 "$d/no_kernel.txt")"
  fi
fi

# No bf16 GEMM algorithm (a GPU without one for these shapes): every GEMM takes the fp32 fallback,
# within the op-scratch row the table declares (validate: the memory terms exact).
d="$tmp/offload"
if [ "$mode" = emulated ] && [ -f "$d/p.json" ]; then
  OOMB_EMULATED_CUBLASLT_NO_BF16=1 "$emu" run --plan "$d/p.json" --backend cuda --steps 1 --warmup 0 \
    --trace "$d/t_fp32.json" >"$d/fp32_gemms.txt" 2>&1
  if grep -qE "GEMM precision bf16: 0 GEMMs in bf16, 0 in tf32, [1-9][0-9]* in fp32" "$d/fp32_gemms.txt" &&
     "$cpu" validate --plan "$d/p.json" --trace "$d/t_fp32.json" >"$d/fp32_validate.txt" 2>&1; then
    pass=$((pass + 1))
  else
    bad "fp32_fallback: $(tail -4 "$d/fp32_gemms.txt") $(grep FAIL "$d/fp32_validate.txt")"
  fi
fi

echo "emulated runs: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
