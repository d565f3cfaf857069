#!/usr/bin/env bash
# Everything the open GPU criteria need, in one call on a GPU machine (no install needed):
# the timing-fidelity benchmark, then every gpu-marked test (CUDA candidates, side streams,
# the physical floor, library kernels, the examples at full size). Logs and JSON go to $OUT
# when it is set (the device tool), else to benchmarks/results/. Each part takes about 5 minutes:
# where one command may run 10 minutes at most, run them as two calls.
#   bash scripts/gpu_checks.sh [bench|tests|diagnose|all]
# diagnose: the markdown diagnosis of working examples (with Nsight Compute) and of an
# out-of-bounds kernel under compute-sanitizer.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export KFOUNDRY_CACHE_DIR=${KFOUNDRY_CACHE_DIR:-/tmp/kfoundry-cache}
out=${OUT:-benchmarks/results}
mkdir -p "$out"
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
part=${1:-all}
if [ "$part" = bench ] || [ "$part" = all ]; then
  timeout ${BENCH_TIMEOUT:-500} python3 benchmarks/timing_fidelity.py ${BENCH_ARGS:-} --out "$out" 2>&1 | tee "$out/timing_fidelity.log" | grep -v "^  \["
fi
if [ "$part" = diagnose ] || [ "$part" = all ]; then
  timeout 420 python3 scripts/diagnose_showcase.py working --ncu --examples ${EXAMPLES:-pointwise_chain,linear_epilogue,layernorm} --out "$out/diagnoses" 2>&1 | tee "$out/diagnose_working.log"
  timeout 150 python3 scripts/diagnose_showcase.py sanitize --out "$out/diagnoses" 2>&1 | tee "$out/diagnose_sanitize.log"
fi
if [ "$part" = tests ] || [ "$part" = all ]; then
  timeout 540 python3 -m pytest -q -m gpu ${TESTS:-tests} -p no:cacheprovider -rs --durations=10 2>&1 | tee "$out/gpu_tests.log" | tail -40
fi
