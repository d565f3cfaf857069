#!/usr/bin/env bash
# The whole test suite on CPU (Triton kernels through its interpreter). Creates .venv if needed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Two workers (KFOUNDRY_TEST_WORKERS=0 runs in one process): a file's tests stay in one worker, and the Ray
# tests share one (tests/conftest.py).
exec .venv/bin/python -m pytest -q -n "${KFOUNDRY_TEST_WORKERS:-2}" --dist loadgroup "$@"
