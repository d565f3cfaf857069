#!/usr/bin/env bash
# Everything the open GPU criteria need, in one call on a GPU machine (no install needed):
# the timing-fidelity benchmark, then every gpu-marked test (CUDA candidates, side streams,
# the physical floor, library kernels, the examples at full size). Logs and JSON go to $OUT
# when it is set (the device tool), else to benchmarks/results/.
#   bash scripts/gpu_checks.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export KFOUNDRY_CACHE_DIR=${KFOUNDRY_CACHE_DIR:-/tmp/kfoundry-cache}
out=${OUT:-benchmarks/results}
mkdir -p "$out"
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
timeout 420 python3 benchmarks/timing_fidelity.py 2>&1 | tee "$out/timing_fidelity.log" | grep -v "^  \["
cp benchmarks/results/timing_fidelity-*.json "$out/" 2>/dev/null
timeout 420 python3 -m pytest -q -m gpu tests -p no:cacheprovider 2>&1 | tee "$out/gpu_tests.log" | tail -15
