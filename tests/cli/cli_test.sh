#!/usr/bin/env bash
# End-to-end checks of the oomb CLI: outputs, JSON keys, and bad input -> clear message + exit 2.
# Usage: cli_test.sh path/to/oomb
set -u
oomb=$1
tmp=$(mktemp -d)
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

expect_exit 0 "features: cuda=(yes|no) cupti=(yes|no) gui=(yes|no)" --version
expect_exit 0 "qwen2.5-7b" models
expect_exit 0 "FITS" simulate --model qwen2.5-7b --gpu h200 --context 4M
expect_exit 0 "host_kv_grad_pages +448.00 GiB" simulate --preset oomb-published --model qwen2.5-7b --gpu h200 --context 4M --attention sparse
expect_exit 0 "OOM" sweep --model qwen2.5-7b --gpu h200 --contexts 8K..1M

# JSON summary has exactly the documented keys.
"$oomb" simulate --model qwen2.5-7b --gpu h200 --context 1M --json >"$tmp/s.json" || bad "simulate --json failed"
for key in peak_device_bytes peak_host_bytes step_s tokens_per_s h2d_bytes d2h_bytes exposed_copy_s \
           required_h2d_bytes_per_s required_d2h_bytes_per_s device_pool_pages device_breakdown_bytes feasible \
           binding_constraint; do
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
expect_exit 2 "--attention.*dense, sparse" simulate --model qwen2.5-7b --gpu h200 --context 4M --attention fuzzy
expect_exit 2 "--preset" simulate --model qwen2.5-7b --gpu h200 --context 4M --preset nope
expect_exit 2 "--contexts" sweep --model qwen2.5-7b --gpu h200 --contexts 4M..8K
expect_exit 2 "cannot open" simulate --model /nonexistent/m.json --gpu h200 --context 4M
printf '{"schema": "oomb.model/1", "id": "x"' >"$tmp/trunc.json"
expect_exit 2 "trunc.json.*not valid JSON" simulate --model "$tmp/trunc.json" --gpu h200 --context 4M
expect_exit 2 "--context" simulate --model qwen2.5-7b --gpu h200
expect_exit 2 "--detail" simulate --model tiny --gpu h200 --context 8K --timeline "$tmp/never.json" --detail frame
[ ! -e "$tmp/never.json" ] && ok || bad "a timeline was written despite the error"

echo "cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
