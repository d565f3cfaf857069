#!/usr/bin/env bash
# Everything the open GPU criteria need, in one call on a GPU machine (no install needed):
# the timing-fidelity benchmark, then every gpu-marked test (CUDA candidates, side streams,
# the physical floor, library kernels, the examples at full size). Logs and JSON go to $OUT
# when it is set (the device tool), else to benchmarks/results/. Each part takes about 5 minutes:
# where one command may run 10 minutes at most, run them as two calls.
#   bash scripts/gpu_checks.sh [bench|tests|all]
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export KFOUNDRY_CACHE_DIR=${KFOUNDRY_CACHE_DIR:-/tmp/kfoundry-cache}
out=${OUT:-benchmarks/results}
mkdir -p "$out"
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
part=${1:-all}
if [ "$part" = bench ] || [ "$part" = all ]; then
  timeout 500 python3 benchmarks/timing_fidelity.py 2>&1 | tee "$out/timing_fidelity.log" | grep -v "^  \["
  cp benchmarks/results/timing_fidelity-*.json "$out/" 2>/dev/null
fi
if [ "$part" = tests ] || [ "$part" = all ]; then
  timeout 500 python3 -m pytest -q -m gpu tests -p no:cacheprovider 2>&1 | tee "$out/gpu_tests.log" | tail -15
fi
