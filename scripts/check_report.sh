#!/usr/bin/env bash
# Renders the HTML report of `oomb simulate --report` with headless Chromium and checks that a
# screenshot came out: a manual / developer check of how the report looks (not run in CI).
# Builds nothing. Usage: scripts/check_report.sh OUT.png
#   OOMB_BIN   the oomb binary (default ./build/oomb)
#   REPORT     where the HTML goes (default /tmp/r.html)
set -euo pipefail

out=${1:?usage: scripts/check_report.sh OUT.png}
bin=${OOMB_BIN:-./build/oomb}
report=${REPORT:-/tmp/r.html}
min_png_bytes=20000  # a blank 1280x2000 page compresses to a few KiB; the report is far above

[ -x "$bin" ] || { echo "check_report: no oomb binary at $bin (build it, or set OOMB_BIN)" >&2; exit 2; }
"$bin" simulate --model qwen2.5-7b --gpu h200 --context 256K --report "$report"
[ -s "$report" ] || { echo "check_report: $report was not written" >&2; exit 1; }

chromium_bin=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chromium_bin" ]; then
  echo "check_report: installing chromium" >&2
  apt-get install -y chromium >/dev/null || { apt-get update >/dev/null && apt-get install -y chromium >/dev/null; }
  chromium_bin=$(command -v chromium)
fi

profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
rm -f "$out"
"$chromium_bin" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --user-data-dir="$profile" --window-size=1280,2000 \
  --screenshot="$out" "file://$(realpath "$report")" 2>/dev/null

[ -f "$out" ] || { echo "check_report: no screenshot at $out" >&2; exit 1; }
size=$(stat -c %s "$out")
if [ "$(head -c 8 "$out" | od -An -tx1 | tr -d ' \n')" != "89504e470d0a1a0a" ]; then
  echo "check_report: $out is not a PNG" >&2
  exit 1
fi
if [ "$size" -lt "$min_png_bytes" ]; then
  echo "check_report: $out is only $size bytes: the page probably rendered blank" >&2
  exit 1
fi
echo "check_report: $report rendered to $out ($size bytes)"
