"""The guard's detection table: every candidate of the adversarial corpus (tests/fixtures/guard)
evaluated against tests/fixtures/problems/affine.py, and the rule that caught it.

    python scripts/guard_table.py [--device cpu|cuda] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    from kfoundry.evaluate import EvalOptions, Evaluator

    corpus = sorted((ROOT / "tests" / "fixtures" / "guard").glob("*.py"))
    rows, caught, missed, legit_ok, legit_flagged = [], defaultdict(list), defaultdict(list), [], []
    options = EvalOptions(device=args.device, trials=2, seed=7, timeout_s=300)
    with Evaluator(ROOT / "tests" / "fixtures" / "problems" / "affine.py", options) as evaluator:
        for path in corpus:
            first = path.read_text().splitlines()[0].strip('"').strip()
            kind, _, rest = first.partition(":")
            expected = rest.split(":")[0].strip() if kind == "cheat" else None
            evaluation = evaluator.evaluate(path)
            rules = [f["rule"] for f in evaluation.guard.get("findings", [])]
            rows.append({"candidate": path.name, "kind": kind, "expected": expected, "status": evaluation.status,
                         "rules": rules})
            if kind == "cheat":
                (caught if evaluation.status == "cheating" and expected in rules else missed)[expected].append(path.stem)
            else:
                (legit_ok if evaluation.status == "ok" and not rules else legit_flagged).append(path.stem)
            print(f"{path.name:<32} {evaluation.status:<10} {', '.join(rules)}", flush=True)
    print()
    print(f"device {args.device}; problem tests/fixtures/problems/affine.py; policy strict")
    print("| rule | cheating candidates caught | missed |")
    print("| --- | --- | --- |")
    for rule in sorted(set(caught) | set(missed)):
        print(f"| {rule} | {', '.join(caught[rule]) or '-'} | {', '.join(missed[rule]) or '-'} |")
    print(f"\nlegitimate candidates passed untouched: {len(legit_ok)} of {len(legit_ok) + len(legit_flagged)}"
          + (f"; flagged: {', '.join(legit_flagged)}" if legit_flagged else ""))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0 if not any(missed.values()) and not legit_flagged else 1


if __name__ == "__main__":
    sys.exit(main())
