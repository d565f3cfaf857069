#!/usr/bin/env bash
# kfoundry doctor and the environment faults of issue 37 on a GPU machine, from the repository root: the doctor on
# a free GPU; a dependency on PYTHONPATH that the sandbox cannot read (eval must exit 2 with one message); another
# process holding 125 GiB (the preflight names it, and eval of a problem that then cannot fit exits 2 naming it).
# Needs .whl (tenacity, bm25s wheels: see the device README) carried where the image lacks them.
set -u
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 COLUMNS=200
python3 -c 'import torch, triton; print("torch", torch.__version__, torch.version.cuda, "triton", triton.__version__)'
echo "== 1. doctor on a free GPU"
timeout 240 python3 -m kfoundry doctor; echo "exit $?"
echo "== 2. a dependency the sandbox cannot read (the issue's machine): eval"
mkdir -p /tmp/kf/hidden /tmp/kf/deps
cp "$(python3 -c 'import typing_extensions; print(typing_extensions.__file__)')" /tmp/kf/hidden/
ln -sf /tmp/kf/hidden/typing_extensions.py /tmp/kf/deps/typing_extensions.py
PYTHONPATH=$PYTHONPATH:/tmp/kf/deps timeout 240 python3 -m kfoundry eval examples/pointwise_chain/problem.py examples/pointwise_chain/kernel.py --trials 2 --timing-trials 10 --json > /tmp/kf/eval.json; echo "exit $?"
cut -c1-700 /tmp/kf/eval.json; echo
echo "== 3. another process holds 125 GiB of the GPU"
python3 -c "
import torch, time
x = torch.empty(125 << 30, dtype=torch.uint8, device='cuda')
open('/tmp/kf/held', 'w').write('1')
time.sleep(500)" &
holder=$!
for i in $(seq 60); do [ -f /tmp/kf/held ] && break; sleep 1; done
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
echo "-- doctor's cheap part (what optimize and bench run first)"
timeout 120 python3 -c "
from kfoundry.doctor import preflight
for c in preflight('cuda:0'): print(c.text())"
echo "-- eval of a problem whose reference needs about 24 GiB"
timeout 300 python3 -m kfoundry eval examples/pointwise_chain/problem.py examples/pointwise_chain/kernel.py --set batch_size=131072 --set dim=16384 --trials 1 --timing-trials 5 --json > /tmp/kf/oom.json; echo "exit $?"
cut -c1-1500 /tmp/kf/oom.json; echo
kill $holder
