"""Timing fidelity of the evaluator, on a GPU.

(a) repeatability: the same candidate evaluated N times, each in a fresh worker process: the
    spread of the medians, (max - min) / median;
(b) agreement: the evaluator's eager baseline median against triton.testing.do_bench's median
    for the same reference on the same inputs (do_bench flushes L2 too, but times back-to-back
    launches, so launch-bound cases differ by design and are reported apart);
(c) cost: seconds of one full evaluation of a small example, split by phase.

Prints a table and writes JSON to benchmarks/results/.

For (a), the profiler's kernel durations of each repeat are listed beside the medians: they show
whether a difference between processes is the kernel's or the host's (the launch path is inside the
timed region by design).

    python benchmarks/timing_fidelity.py [--examples a,b,c] [--repeats 5] [--set example:NAME=VALUE ...] [--out DIR]
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import json
import platform
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import torch

from kfoundry import problem as problems
from kfoundry.evaluate import EvalOptions, Evaluator
from kfoundry.types import to_jsonable

LAUNCH_BOUND_MS = 0.1
SMALL = {"row_softmax": {"batch_size": 64, "dim": 1000}}


def parse_sets(items: list[str]) -> dict[str, dict[str, object]]:
    """`example:NAME=VALUE` items -> {example: {NAME: value}}."""
    out: dict[str, dict[str, object]] = {}
    for item in items:
        example, _, assignment = item.partition(":")
        name, _, value = assignment.partition("=")
        if not (example and name and value):
            raise SystemExit(f"--set wants example:NAME=VALUE, got {item!r}")
        try:
            parsed = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            parsed = value
        out.setdefault(example, {})[name] = parsed
    return out


def stats_row(stats) -> dict | None:
    if stats is None:
        return None
    keys = ("median_ms", "q1_ms", "q3_ms", "min_ms", "max_ms", "trials", "event_median_ms", "host_median_ms",
            "host_flagged_trials", "warmup_runs", "warmup_s", "sm_clock_mhz")
    return {k: getattr(stats, k, None) for k in keys}


def evaluate_repeats(problem: Path, kernel: Path, options: EvalOptions, repeats: int, label: str) -> list:
    with Evaluator(problem, options, progress=lambda m: print(f"  [{label}] {m}", flush=True)) as evaluator:
        return [evaluator.evaluate(kernel) for _ in range(repeats)]


def kernel_us(evaluation) -> float | None:
    """Sum of the kernel durations the profiler saw in one call (no launch overhead, no L2 flush)."""
    kernels = (evaluation.profile or {}).get("kernels") or []
    durations = [k.get("duration_us") for k in kernels if k.get("duration_us") is not None]
    return round(sum(durations), 2) if durations else None


def spread(times: list[float]) -> float | None:
    return (max(times) - min(times)) / statistics.median(times) if len(times) > 1 else None


def do_bench_eager(problem_path: Path, precision: str, set_values: dict | None = None) -> float:
    """do_bench median (ms) of the eager reference on the problem's inputs, in this process."""
    import triton.testing

    source = problems.read_problem(problem_path, set_values)
    module = problems.load_problem_module(source)
    dtype = problems.torch_dtype(precision)
    model = problems.build_model(module.Model, problems.init_inputs_of(module), 0, dtype, "cuda", False)
    inputs = problems.make_inputs(module, 1, dtype, "cuda")
    with torch.no_grad():
        return float(triton.testing.do_bench(lambda: model(*inputs), warmup=100, rep=1000, return_mode="median"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", default="pointwise_chain,row_softmax,linear_epilogue,conv_relu,layernorm")
    parser.add_argument("--repeat-examples", default="row_softmax,layernorm,pointwise_chain")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--skip-cost", action="store_true", help="skip (c), the cold evaluation of a small example")
    parser.add_argument("--set", action="append", default=[], metavar="EXAMPLE:NAME=VALUE",
                        help="override a module constant of one example's problem (sizes)")
    args = parser.parse_args()
    sets = parse_sets(args.set)
    if not torch.cuda.is_available():
        print("timing_fidelity needs a CUDA GPU", file=sys.stderr)
        return 2
    import triton

    cache = Path(tempfile.mkdtemp(prefix="kfoundry-bench-cache-"))
    device_name = torch.cuda.get_device_name()
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = args.out / f"timing_fidelity-{stamp}.json"

    def save(rows: list, cost: dict | None) -> None:
        path.write_text(json.dumps(to_jsonable({
            "device": device_name, "torch": torch.__version__, "triton": triton.__version__,
            "python": platform.python_version(), "precision": args.precision, "examples": rows,
            "evaluation_cost": cost,
        }), indent=2, default=str))
    rows, repeat_rows = [], []
    for name in [e for e in args.examples.split(",") if e]:
        problem, kernel = ROOT / "examples" / name / "problem.py", ROOT / "examples" / name / "kernel.py"
        # eager only and one correctness trial: this script is about timing, not verdicts
        set_values = sets.get(name, {})
        options = EvalOptions(device="cuda", precision=args.precision, cache_dir=cache, no_cache=True,
                              trials=1, baselines=("eager",), set_values=set_values)
        repeats = args.repeats if name in args.repeat_examples.split(",") else 1
        evaluations = evaluate_repeats(problem, kernel, options, repeats, name)
        first = evaluations[0]
        bench_ms = do_bench_eager(problem, args.precision, set_values)
        eager_ms = first.timing.eager_ms
        eager_stats = first.timing.baselines.get("eager")
        row = {
            "example": name, "set": set_values, "status": [e.status for e in evaluations],
            "candidate_ms": [e.timing.runtime_ms for e in evaluations],
            "candidate_stats": [stats_row(e.timing.candidate) for e in evaluations],
            "kernel_us": [kernel_us(e) for e in evaluations],
            "eager_stats": stats_row(eager_stats),
            "eager_ms": eager_ms, "compile_ms": first.timing.compile_ms, "do_bench_eager_ms": bench_ms,
            "eager_vs_do_bench": (eager_ms / bench_ms - 1) if eager_ms else None,
            "launch_bound": bench_ms < LAUNCH_BOUND_MS,
            "speedup_eager": first.timing.speedup_eager, "speedup_compile": first.timing.speedup_compile,
            "eager_trials": eager_stats.trials if eager_stats else None,
            "eager_event_ms": eager_stats.event_median_ms if eager_stats else None,
            "eager_host_ms": eager_stats.host_median_ms if eager_stats else None,
            "candidate_trials": first.timing.trials, "durations_s": first.durations_s,
            "message": first.message, "warnings": first.warnings,
        }
        times = [t for t in row["candidate_ms"] if t is not None]
        if len(times) > 1:
            row["repeat_spread"] = spread(times)
            repeat_rows.append(row)
        rows.append(row)
        spread_text = f"; spread of {len(times)} medians {100 * row['repeat_spread']:.2f}%" if len(times) > 1 else ""
        diff = f"{100 * row['eager_vs_do_bench']:+.1f}%" if row["eager_vs_do_bench"] is not None else "-"
        print(f"{name}: {row['status']} cand {times} ms; eager {eager_ms} vs do_bench {bench_ms:.4f} ({diff}){spread_text}",
              flush=True)
        save(rows, None)  # after every example: a run cut short by a time limit keeps what it measured

    # (c) one full evaluation of a small example, cold: fresh cache, default settings
    small_name, small_set = next(iter(SMALL.items()))
    small = None
    if not args.skip_cost:
        with Evaluator(ROOT / "examples" / small_name / "problem.py",
                       EvalOptions(device="cuda", set_values=small_set, cache_dir=Path(tempfile.mkdtemp()))) as evaluator:
            small = evaluator.evaluate(ROOT / "examples" / small_name / "kernel.py")
        save(rows, {"example": small_name, "set": small_set, "status": small.status,
                    "durations_s": small.durations_s})

    print()
    print(f"device: {device_name}; torch {torch.__version__}; triton {triton.__version__}; "
          f"python {platform.python_version()}; precision {args.precision}; statistic: median")
    print("(b) eager baseline (evaluator) vs triton.testing.do_bench, and candidate timings")
    header = (f"{'example':<16}{'eager ms':>10}{'(events)':>10}{'(host)':>10}{'do_bench':>10}{'diff':>8}"
              f"{'cand ms':>10}{'x eager':>9}  note")
    print(header)
    nan = float("nan")
    for row in rows:
        diff = f"{100 * row['eager_vs_do_bench']:+.1f}%" if row["eager_vs_do_bench"] is not None else "-"
        cand = row["candidate_ms"][0]
        label = row["example"] + ("*" if row["set"] else "")
        print(f"{label:<16}{row['eager_ms'] or nan:>10.4f}{row['eager_event_ms'] or nan:>10.4f}"
              f"{row['eager_host_ms'] or nan:>10.4f}{row['do_bench_eager_ms']:>10.4f}{diff:>8}"
              f"{cand or nan:>10.4f}{row['speedup_eager'] or nan:>9.3f}  {'launch-bound' if row['launch_bound'] else ''}")
    for row in rows:
        if row["set"]:
            print(f"  * {row['example']} with {row['set']}")
    print(f"(a) the same candidate in {args.repeats} fresh worker processes: spread of medians")
    for row in repeat_rows:
        print(f"{row['example']:<16} medians {', '.join(f'{t:.4f}' for t in row['candidate_ms'])} ms; "
              f"spread {100 * row['repeat_spread']:.2f}%; profiled kernel us {row['kernel_us']}")
    if small is not None:
        print(f"(c) one cold evaluation of {small_name} {small_set}: {small.status}; seconds by phase: "
              f"{small.durations_s}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
