"""Entry point of every evaluation process (`python -m kfoundry.sandbox.start`): the sandbox first,
then the worker (kfoundry.evaluate.worker.entry), which imports torch.

Every one of them first completes its import path as the parent's (kfoundry.sandbox.environment: the
parent's entries it lacks, the problem's folder first). A candidate's worker then restricts itself
(kfoundry.sandbox.policy, whose rules open that import path for reading) before anything else runs in it; the
judge and the baseline process, which never run a candidate, only make themselves non-dumpable. The
record of what held goes to the parent with the worker's `ready`. Every one of them then keeps a
lifeline (kfoundry.sandbox.lifeline): it ends itself and what it started when its parent is gone.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REFERENCE_LABELS = ("judge", "baselines")  # they never import a candidate


def main() -> int:
    from kfoundry.sandbox.environment import extend_sys_path

    extend_sys_path()
    label = os.environ.get("KFOUNDRY_WORKER_LABEL", "")
    # every worker that runs a candidate's code (its evaluation, a replay under ncu or compute-sanitizer)
    if label not in REFERENCE_LABELS and os.environ.get("KFOUNDRY_SANDBOX", "on") != "off":
        from kfoundry.sandbox import policy

        device = os.environ.get("KFOUNDRY_WORKER_DEVICE", "cpu")
        # strict: not even /dev/shm, which CUDA IPC needs (the evaluator then sends outputs as files)
        report = policy.apply(Path.cwd(), gpu=device.startswith("cuda"),
                              allow_inet=os.environ.get(policy.INET_ENV) == "1",
                              shared_memory=os.environ.get(policy.MODE_ENV) != "strict").to_dict()
    else:
        from kfoundry.sandbox.process_flags import make_non_dumpable

        report = {"dumpable": not make_non_dumpable(), "applies_to": "workers that run a candidate"}
    from kfoundry.sandbox.lifeline import watch

    lifeline = watch()  # after the sandbox: the thread is bound by it too
    from kfoundry.evaluate.worker import entry

    return entry.main(sandbox=report, lifeline=lifeline)


if __name__ == "__main__":
    sys.exit(main())
