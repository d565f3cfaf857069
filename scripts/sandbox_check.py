"""What the candidates' sandbox holds on this machine, and whether torch (and CUDA, on a GPU) work
inside it: each check runs in a child process that applies kfoundry.sandbox.policy first.

    python scripts/sandbox_check.py [--extra-read PATH ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHILD = r"""
import json, os, sys
from pathlib import Path
from kfoundry.sandbox import landlock, policy
extra, skip, devices, writes = (json.loads(a) for a in sys.argv[1:5])
if "landlock" in skip:
    landlock.restrict = lambda rules: (_ for _ in ()).throw(landlock.LandlockUnavailable("skipped by --skip"))
if "seccomp" in skip:
    from kfoundry.sandbox import seccomp
    seccomp.install = lambda allow_inet=False: (_ for _ in ()).throw(seccomp.SeccompUnavailable("skipped by --skip"))
original = policy.worker_rules
def widened(*args, **kwargs):
    rules = original(*args, **kwargs)
    rules.read += extra
    rules.devices += devices
    rules.write += writes
    rules.handle_tcp = "tcp" not in skip
    rules.scope = "scope" not in skip
    return rules
policy.worker_rules = widened
report = policy.apply(Path.cwd(), gpu=os.path.exists("/dev/nvidiactl")).to_dict()
out = {"sandbox": report}
try:
    import torch
    out["torch"] = torch.__version__
    if os.path.exists("/dev/nvidiactl"):
        x = torch.ones(1 << 20, device="cuda")  # raises the driver's own error where CUDA cannot start
        out["cuda"] = f"ok: {torch.cuda.get_device_name(0)}, sum {float(x.sum())}"
    else:
        out["cuda"] = "no GPU"
except Exception as exc:
    import traceback
    out["error"] = f"{type(exc).__name__}: {exc}"
    out["traceback"] = traceback.format_exc()[-1500:]
print(json.dumps(out))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra-read", action="append", default=[], help="also grant this path (to find what is missing)")
    parser.add_argument("--extra-device", action="append", default=[], help="also grant this device (read, write, ioctl)")
    parser.add_argument("--extra-write", action="append", default=[], help="also grant this folder read-write")
    parser.add_argument("--skip", action="append", default=[], choices=["landlock", "seccomp", "scope", "tcp"],
                        help="leave this restriction out (to find which one breaks something)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sandbox-check-") as work:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HOME": work, "TMPDIR": work}
        done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args.extra_read), json.dumps(args.skip),
                               json.dumps(args.extra_device), json.dumps(args.extra_write)],
                              cwd=work, env=env,
                              capture_output=True, text=True, timeout=300)
    try:
        result = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        print(done.stdout[-2000:], done.stderr[-3000:])
        return 1
    print(json.dumps(result, indent=2))
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    sys.exit(main())
