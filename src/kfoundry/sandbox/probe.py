"""What the candidates' sandbox holds on this machine, and whether torch (and CUDA, on a GPU) work inside it.

`probe(...)` runs `python -m kfoundry.sandbox.probe` in a child process that applies kfoundry.sandbox.policy
first (its rules widened or parts left out on request, to find what a failure needs) and reports as JSON;
`inside()` is the part that runs once restricted, which kfoundry doctor's worker runs too.
scripts/sandbox_check.py is its command line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SKIPPABLE = ("landlock", "seccomp", "scope", "tcp")
GPU_DEVICE = "/dev/nvidiactl"


def inside(gpu: bool | None = None) -> dict[str, Any]:
    """In a restricted process: torch's version and, where there is a GPU, whether CUDA starts (the
    driver's own error where it cannot)."""
    gpu = os.path.exists(GPU_DEVICE) if gpu is None else gpu
    out: dict[str, Any] = {}
    try:
        import torch

        out["torch"] = torch.__version__
        if gpu:
            x = torch.ones(1 << 20, device="cuda")
            out["cuda"] = f"ok: {torch.cuda.get_device_name(0)}, sum {float(x.sum())}"
        else:
            out["cuda"] = "no GPU"
    except Exception as exc:  # noqa: BLE001 -- reported, whatever it is
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["traceback"] = traceback.format_exc()[-1500:]
    return out


def _restrict(extra_read: list[str], skip: list[str], extra_device: list[str], extra_write: list[str]) -> dict:
    from kfoundry.sandbox import landlock, policy, seccomp

    if "landlock" in skip:
        def unavailable(rules):
            raise landlock.LandlockUnavailable("skipped by --skip")
        landlock.restrict = unavailable
    if "seccomp" in skip:
        def no_seccomp(allow_inet=False):
            raise seccomp.SeccompUnavailable("skipped by --skip")
        seccomp.install = no_seccomp
    original = policy.worker_rules

    def widened(*args, **kwargs):
        rules = original(*args, **kwargs)
        rules.read += extra_read
        rules.devices += extra_device
        rules.write += extra_write
        rules.handle_tcp = "tcp" not in skip
        rules.scope = "scope" not in skip
        return rules

    policy.worker_rules = widened
    return policy.apply(Path.cwd(), gpu=os.path.exists(GPU_DEVICE)).to_dict()


def probe(extra_read: Sequence[str] = (), skip: Sequence[str] = (), extra_device: Sequence[str] = (),
          extra_write: Sequence[str] = (), timeout_s: float = 300) -> dict[str, Any]:
    """The sandbox's report and `inside()`'s, from a fresh restricted child; {"error": ...} where the child
    said nothing readable."""
    import kfoundry

    root = str(Path(kfoundry.__file__).resolve().parent.parent)
    arguments = json.dumps({"extra_read": list(extra_read), "skip": list(skip), "extra_device": list(extra_device),
                            "extra_write": list(extra_write)})
    with tempfile.TemporaryDirectory(prefix="sandbox-check-") as work:
        env = {**os.environ, "PYTHONPATH": root, "HOME": work, "TMPDIR": work}
        done = subprocess.run([sys.executable, "-m", "kfoundry.sandbox.probe", arguments], cwd=work, env=env,
                              capture_output=True, text=True, timeout=timeout_s)
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": "the sandbox probe said nothing readable",
                "output": done.stdout[-2000:] + done.stderr[-3000:]}


def main(arguments: str) -> int:
    given = json.loads(arguments)
    report = _restrict(given["extra_read"], given["skip"], given["extra_device"], given["extra_write"])
    print(json.dumps({"sandbox": report, **inside()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
