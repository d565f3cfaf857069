"""What the candidates' sandbox holds on this machine, and whether torch (and CUDA, on a GPU) work
inside it: each check runs in a child process that applies kfoundry.sandbox.policy first
(kfoundry.sandbox.probe; `kfoundry doctor` checks the same and more).

    python scripts/sandbox_check.py [--extra-read PATH ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from kfoundry.sandbox.probe import SKIPPABLE, probe  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra-read", action="append", default=[], help="also grant this path (to find what is missing)")
    parser.add_argument("--extra-device", action="append", default=[], help="also grant this device (read, write, ioctl)")
    parser.add_argument("--extra-write", action="append", default=[], help="also grant this folder read-write")
    parser.add_argument("--skip", action="append", default=[], choices=list(SKIPPABLE),
                        help="leave this restriction out (to find which one breaks something)")
    args = parser.parse_args()
    result = probe(args.extra_read, args.skip, args.extra_device, args.extra_write)
    if "sandbox" not in result:
        print(result.get("output", ""))
        return 1
    print(json.dumps(result, indent=2))
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    sys.exit(main())
