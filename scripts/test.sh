#!/usr/bin/env bash
# The whole test suite on CPU (Triton kernels through its interpreter). Creates .venv if needed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
