#!/usr/bin/env bash
# Creates .venv (Python 3.11+) with the pinned CPU stack and kfoundry installed in editable mode.
# Safe to re-run: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-}
if [ -z "$python" ]; then
  for candidate in python3.11 python3.12 python3.13 python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
      python=$candidate; break
    fi
  done
fi
[ -n "$python" ] || { echo "error: Python 3.11 or newer is needed (set PYTHON=...)" >&2; exit 2; }
[ -x .venv/bin/python ] || "$python" -m venv .venv
pip() {  # quiet, but a failure prints everything and stops the script
  local out
  if ! out=$(.venv/bin/python -m pip --disable-pip-version-check -q "$@" 2>&1); then echo "$out" >&2; return 1; fi
  grep -v "^WARNING: Location" <<<"$out" || true
}
# torch first, pinned, so the editable install below finds it satisfied and never fetches a CUDA build.
pip install -r requirements/cpu-test.txt
pip install -c requirements/cpu-test.txt -e '.[test]'
.venv/bin/python -c 'import torch, triton, kfoundry; print(f"kfoundry {kfoundry.__version__}: torch {torch.__version__}, triton {triton.__version__}")'
