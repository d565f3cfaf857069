"""The guard's detection table: every candidate of the adversarial corpus (tests/fixtures/guard)
evaluated against tests/fixtures/problems/affine.py, and the rule that caught it; then the sandbox's
corpus (tests/fixtures/sandbox) with the guard off, and whether each attack got through.

    python scripts/guard_table.py [--device cpu|cuda] [--json OUT.json] [--no-sandbox-corpus]
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
    parser.add_argument("--no-sandbox-corpus", action="store_true", help="only the guard's corpus")
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
    through = [] if args.no_sandbox_corpus else sandbox_table(args.device, rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0 if not any(missed.values()) and not legit_flagged and not through else 1


def sandbox_table(device: str, rows: list) -> list[str]:
    """The sandbox corpus with the guard off: each attack in the candidate's constructor raises its outcome
    ("got: ..." or "blocked: ..."). Its targets here are fresh temporary folders and a local TCP port."""
    import secrets
    import socket
    import tempfile

    from kfoundry.evaluate import EvalOptions, Evaluator

    server = socket.create_server(("127.0.0.1", 0))
    through = []
    with tempfile.TemporaryDirectory(prefix="sandbox-table-") as base:
        folders = {name: Path(base, name) for name in ("cache", "library", "run", "corpus")}
        for folder in folders.values():
            folder.mkdir()
        (Path(base) / "kfoundry.toml").write_text('[keys]\nopenai = "sk-sandbox-table"\n')
        (folders["cache"] / ".signing-key").write_text(secrets.token_hex(32))  # a target that exists
        fills = {"@@SECRET@@": "sk-sandbox-table", "@@CACHE_DIR@@": str(folders["cache"]),
                 "@@CONFIG@@": str(Path(base) / "kfoundry.toml"), "@@LIBRARY@@": str(folders["library"]),
                 "@@RUN_DIR@@": str(folders["run"]), "@@TMPDIR@@": tempfile.gettempdir(),
                 "@@TMP_TARGET@@": str(Path(tempfile.gettempdir()) / f"sandbox-probe-{secrets.token_hex(6)}"),
                 "@@PORT@@": str(server.getsockname()[1])}
        files = []
        for path in sorted((ROOT / "tests" / "fixtures" / "sandbox").glob("*.py")):
            text = path.read_text()
            for key, value in fills.items():
                text = text.replace(key, value)
            (folders["corpus"] / path.name).write_text(text)
            files.append(folders["corpus"] / path.name)
        print("\n| sandbox case (guard off) | stopped by | outcome |\n| --- | --- | --- |")
        options = EvalOptions(device=device, trials=1, seed=7, guard=False, timeout_s=300)
        with Evaluator(ROOT / "tests" / "fixtures" / "problems" / "affine.py", options) as evaluator:
            for path in files:
                evaluation = evaluator.evaluate(path)
                stopped_by = path.read_text().splitlines()[0].strip('"').split(":")[1].strip()
                outcome = evaluation.message.rsplit("ATTACK ", 1)[-1]
                if '"got:' in outcome.replace("(control)\": \"got:", "") or outcome.startswith("got"):
                    through.append(path.stem)
                rows.append({"candidate": path.name, "kind": "sandbox", "expected": stopped_by,
                             "status": evaluation.status, "outcome": outcome[:400]})
                print(f"| {path.stem} | {stopped_by} | {outcome[:160]} |", flush=True)
    server.close()
    print(f"\nattacks that got through the sandbox: {', '.join(through) or 'none'}")
    return through


if __name__ == "__main__":
    sys.exit(main())
