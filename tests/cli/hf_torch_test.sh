#!/usr/bin/env bash
# Runs hf_torch_check.py with the first Python that has torch (Debian's python3-torch lives in the
# system Python, which may not be the python3 on PATH); exit code 77 (skipped) when none has it.
# Usage: hf_torch_test.sh path/to/oomb [check.py, default hf_torch_check.py]
here=$(dirname "$0")
script="$here/${2:-hf_torch_check.py}"
for py in python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null && "$py" -c "import torch" 2>/dev/null; then
    exec "$py" "$script" "$1"
  fi
done
echo "no Python with torch (python3-torch): skipped"
exit 77
