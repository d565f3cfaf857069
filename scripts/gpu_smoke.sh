#!/usr/bin/env bash
# On a GPU machine without installing the package: evaluate every example at its default (GPU)
# sizes, run the gpu-marked tests, and print the verdicts. Usage: bash scripts/gpu_smoke.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -c 'import sys, torch, triton; print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__)'
for example in examples/*/; do
  name=$(basename "$example")
  start=$(date +%s)
  python3 -m kfoundry eval "$example/problem.py" "$example/kernel.py" --json > "/tmp/eval-$name.json"
  code=$?
  python3 - "$name" "$code" "$(( $(date +%s) - start ))" "/tmp/eval-$name.json" <<'PY'
import json, sys
name, code, seconds, path = sys.argv[1:]
try:
    r = json.load(open(path))
except Exception as exc:
    print(f"{name:<16} exit {code} ({seconds}s): no JSON ({exc})"); sys.exit()
t = r.get("timing") or {}
f = lambda v, d=4: "-" if v is None else f"{v:.{d}g}"
print(f"{name:<16} exit {code} ({seconds}s) {r['status']:<13} cand {f(t.get('runtime_ms'))} ms  eager {f(t.get('eager_ms'))}  "
      f"compile {f(t.get('compile_ms'))}  x{f(t.get('speedup_eager'), 3)} / x{f(t.get('speedup_compile'), 3)}  "
      f"err {f((r.get('correctness') or {}).get('max_abs_error'), 3)}  {r['message'][:300] if r['status'] != 'ok' else ''}")
for w in r.get("warnings", []): print("   warning:", w)
PY
done
python3 -m pytest -q -m gpu tests -p no:cacheprovider 2>&1 | tail -15
