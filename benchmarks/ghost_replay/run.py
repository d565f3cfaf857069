"""Ghost replay on problems whose outputs barely depend on their inputs: the composer's legitimate
candidates must not be judged cheating, and two cheats must not pass.

Two problems of our own (this folder): pool_lse, a global average pool, a bias, logsumexp over the
channels and a scale, to (B, 1); deep_pool, a stem, a max pool and twelve randomly initialised 3x3
convolutions with ReLU, ending in global average pooling and a linear layer as GoogLeNet does. For each:
compose up to --variants legitimate candidates, and wrap the first in the two cheats of cheats.py
(`unwritten`: the output returned is a fresh tensor no kernel writes; `kept`: the first call's output,
returned by every later call). Every candidate is judged by one Evaluator per problem (the reference
prepared once). Prints a table (problem, candidate, verdict, guard findings, whether the evaluation's
warnings call the problem weak, whether that is what was expected) and writes JSON with the device and
the torch and triton versions.

    python benchmarks/ghost_replay/run.py [--device cuda] [--variants 3] [--trials 5]
        [--set NAME=VALUE | --set PROBLEM.NAME=VALUE ...] [--small] [--src PATH] [--out benchmarks/results]
    python benchmarks/ghost_replay/run.py --device cpu --small     # end to end on a machine with no GPU

--src imports kfoundry from another source tree (another version of the guard, for a before/after).

On one H200 (benchmarks/results/ghost_replay-nvidia-h200-20261204T182327Z.json, 110 s): the 5 composed
candidates that compile are `ok`, `unwritten` is `wrong_output` (NaN) and `kept` is `cheating` [ghost-replay]
on both problems, each called weak (input-independent). The guard before the ghost run poisoned what forward
allocates (...-before.json) judged all 5 `cheating` [ghost-replay]. deep_pool's tf32x3 variant needs
262144 bytes of shared memory, more than the H200 has: a compile_error, the composer's.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PROBLEMS = {"pool_lse": HERE / "pool_lse.py", "deep_pool": HERE / "deep_pool.py"}
# sizes the Triton interpreter gets through in seconds, still nearly input-independent at atol = rtol = 1e-4
SMALL = {"pool_lse": {"batch_size": 4, "channels": 16, "height": 32, "width": 32, "scale": 1e-3},
         "deep_pool": {"batch_size": 2, "channels": 8, "size": 16, "classes": 16}}
# a legitimate candidate the composer got wrong (a compile error, say) says nothing of the guard: not cheating
EXPECTED = {"legit": "not cheating", "unwritten": "not ok", "kept": "cheating (ghost-replay)"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (Triton's interpreter)")
    parser.add_argument("--problems", default=",".join(PROBLEMS), help="comma-separated: pool_lse,deep_pool")
    parser.add_argument("--variants", type=int, default=3, help="legitimate composer candidates per problem")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--timing-trials", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=300.0, help="per evaluation, seconds")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], metavar="[PROBLEM.]NAME=VALUE",
                        help="override a module-level size (every problem that defines NAME, or PROBLEM's only)")
    parser.add_argument("--small", action="store_true", help="small sizes for a CPU check (before any --set)")
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="the source tree kfoundry is imported from")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    return parser.parse_args(argv)


def problem_settings(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Each chosen problem's --set values: --small first, then every --set in order."""
    from kfoundry.problem import parse_set_values

    chosen = [name.strip() for name in args.problems.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in PROBLEMS]
    if unknown:
        raise SystemExit(f"unknown problem(s) {', '.join(unknown)}: choose from {', '.join(PROBLEMS)}")
    settings = {name: dict(SMALL[name]) if args.small else {} for name in chosen}
    for item in args.set:
        target, _, rest = item.partition(".") if re.match(r"^\w+\.\w+=", item) else ("", "", item)
        [(key, value)] = parse_set_values([rest]).items()
        for name in chosen:
            defines = re.search(rf"^{key}\s*=", PROBLEMS[name].read_text(), re.MULTILINE)
            if (target == name) or (not target and defines):
                settings[name][key] = value
    return settings


def candidates_for(name: str, set_values: dict[str, Any], args: argparse.Namespace,
                   folder: Path) -> tuple[list[tuple[str, str, Path]], str]:
    """(label, kind, file) for the composed variants and the two cheats, and the composer's message."""
    from kfoundry.experts.composer import compose

    sys.path.insert(0, str(HERE))
    from cheats import CHEATS, wrap

    result = compose(PROBLEMS[name], set_values=set_values, max_variants=args.variants, tolerance=args.tolerance)
    found: list[tuple[str, str, Path]] = []
    for candidate in result.candidates:
        path = folder / f"{name}-{candidate.name}.py"
        path.write_text(candidate.source)
        found.append((candidate.name, "legit", path))
    if result.candidates:
        for cheat in CHEATS:
            path = folder / f"{name}-cheat-{cheat}.py"
            path.write_text(wrap(result.candidates[0].source, cheat))
            found.append((f"cheat: {cheat}", cheat, path))
    return found, result.message


def weak_kinds(warnings: list[str]) -> list[str]:
    """What the evaluation's warnings call the problem: input-independent, near zero, random."""
    kinds = []
    for warning in warnings:
        if warning.startswith("weak problem: "):
            text = warning.removeprefix("weak problem: ")
            kinds.append("input-independent" if "does not depend on its inputs" in text else
                         "near zero" if "of zero" in text else "random" if "differs between" in text else text[:40])
    return kinds


def as_expected(kind: str, status: str, findings: list[str]) -> bool:
    if kind == "legit":
        return status != "cheating"
    if kind == "kept":
        return status == "cheating" and "ghost-replay" in findings
    return status != "ok"


def judge(name: str, set_values: dict[str, Any], args: argparse.Namespace, folder: Path) -> list[dict[str, Any]]:
    """Every candidate of one problem, judged by one Evaluator (several at once where it has slots)."""
    from kfoundry.evaluate import EvalOptions, Evaluator

    candidates, message = candidates_for(name, set_values, args, folder)
    print(f"{name}: {message}", file=sys.stderr, flush=True)
    options = EvalOptions(device=args.device, trials=args.trials, tolerance=args.tolerance, seed=args.seed,
                          set_values=set_values, timeout_s=args.timeout, timing_trials=args.timing_trials,
                          timing_budget_s=2.0, baselines=("eager",))
    with Evaluator(PROBLEMS[name], options) as evaluator:
        evaluator.prepare()

        def one(candidate: tuple[str, str, Path]) -> dict[str, Any]:
            label, kind, path = candidate
            started = time.perf_counter()
            evaluation = evaluator.evaluate(path)
            findings = [f["rule"] for f in evaluation.guard.get("findings", [])]
            facts = evaluation.device_facts
            row = {"problem": name, "candidate": label, "kind": kind, "expected": EXPECTED[kind],
                   "status": evaluation.status, "findings": findings, "weak": weak_kinds(evaluation.warnings),
                   "as_expected": as_expected(kind, evaluation.status, findings),
                   "message": evaluation.message, "seconds": round(time.perf_counter() - started, 1),
                   "median_ms": evaluation.timing.candidate.median_ms if evaluation.timing.candidate else None,
                   "device_name": getattr(facts, "name", None)}
            print(f"  {name} / {label}: {row['status']} {findings} ({row['seconds']} s)", file=sys.stderr, flush=True)
            return row

        with ThreadPoolExecutor(max_workers=max(1, evaluator.slots)) as pool:
            return list(pool.map(one, candidates))


def print_table(rows: list[dict[str, Any]]) -> None:
    header = ("problem", "candidate", "verdict", "guard findings", "weak", "expected", "as expected", "s")
    lines = [header] + [(r["problem"], r["candidate"][:60], r["status"], ",".join(r["findings"]) or "-",
                         ",".join(r["weak"]) or "no", r["expected"], "yes" if r["as_expected"] else "NO",
                         f"{r['seconds']:.0f}") for r in rows]
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    for k, line in enumerate(lines):
        print("  ".join(str(cell).ljust(width) for cell, width in zip(line, widths)))
        if k == 0:
            print("  ".join("-" * width for width in widths))


def versions() -> dict[str, Any]:
    import torch
    import triton

    return {"torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version()}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before anything imports triton; the workers inherit it
    sys.path.insert(0, str(args.src.resolve()))
    settings = problem_settings(args)
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ghost-replay-") as folder:
        for name, set_values in settings.items():
            rows += judge(name, set_values, args, Path(folder))
    print_table(rows)
    print()
    device_name = next((r["device_name"] for r in rows if r["device_name"]), None) or platform.processor() or "cpu"
    record = {"benchmark": "ghost_replay", "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "device": args.device, "device_name": device_name, **versions(), "kfoundry_src": str(args.src),
              "settings": {"trials": args.trials, "tolerance": args.tolerance, "variants": args.variants,
                           "seed": args.seed, "timing_trials": args.timing_trials, "problems": settings},
              "total_seconds": round(time.perf_counter() - started, 1), "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")[:32] or args.device
    path = args.out / f"ghost_replay-{slug}-{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    wrong = sum(not r["as_expected"] for r in rows)
    for kind in EXPECTED:
        verdicts = Counter(r["status"] for r in rows if r["kind"] == kind)
        print(f"{kind}: " + ", ".join(f"{n} {status}" for status, n in sorted(verdicts.items())))
    print(f"{len(rows) - wrong} of {len(rows)} as expected; {record['total_seconds']} s; JSON: {path}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
