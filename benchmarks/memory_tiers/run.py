"""Every problem eager PyTorch runs gets a verdict: the judge's memory tiers at public single-op sizes, on a GPU.

For each problem of benchmarks/memory_tiers/ (ours: a row softmax and a SELU over 4096 x 393216 fp32, a Conv2d
with an 8.6 GB fp32 output, an MSE loss over two 4.3 GB inputs), the composer writes its first candidate, and
one Evaluator judges it with the tier the memory plan picks (auto), and again with each tier named in --tiers
where that tier fits. While it runs, NVML (kfoundry.gpu_usage: no CUDA context in this process) is sampled
every 0.1 s; the peak of the GPU memory in use, less what was in use before, is set against the plan's
prediction. Reported per run: the verdict, the tier and where the float64 truth was made, the plan's GPU
figure and its largest phase, the measured peak, the set-up time (the judge's sets: inputs, expected outputs,
truth) and the whole evaluation's time.

    python benchmarks/memory_tiers/run.py [--problems 1,3] [--tiers auto,host,per-set] [--baselines eager]
        [--trials 5] [--device cuda] [--set NAME=VALUE ...] [--out benchmarks/results] [--resume FILE.json]

With --device cpu and --set values it runs at small sizes on a CPU (correctness only; no NVML figures).
The JSON is rewritten after every run, so a call stopped at its time limit keeps what it finished; --resume
skips the runs a previous JSON holds.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "src"))

from kfoundry.errors import ProblemError  # noqa: E402
from kfoundry.evaluate import EvalOptions, Evaluator  # noqa: E402
from kfoundry.gpu_usage import gpu_usage  # noqa: E402

HERE = Path(__file__).resolve().parent
GB = 1e9


class GpuPeak:
    """The most GPU memory in use on `index` while it runs (NVML), and who held it then."""

    def __init__(self, index: int, interval_s: float = 0.1) -> None:
        self.index, self.interval_s = index, interval_s
        self.before = self._used()[0]
        self.peak, self.holders = self.before, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _used(self) -> tuple[int, list]:
        usage = gpu_usage()
        for gpu in usage.gpus:
            if gpu.index == self.index:
                return gpu.total_bytes - gpu.free_bytes, [(p.pid, p.name[:60], p.used_bytes) for p in gpu.processes]
        return 0, []

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            used, holders = self._used()
            if used > self.peak:
                self.peak, self.holders = used, holders

    def __enter__(self) -> "GpuPeak":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def compose_candidate(problem: Path, overrides: dict, folder: Path) -> Path:
    from kfoundry.experts.composer import compose

    composed = compose(problem, set_values=overrides or None, max_variants=1, tolerance=1e-4)
    if not composed.candidates:
        raise RuntimeError(f"the composer wrote nothing for {problem.name}: {composed.message}")
    path = folder / f"{problem.stem}_composed.py"
    path.write_text(composed.candidates[0].source)
    return path


def run_one(problem: Path, candidate: Path, tier: str, args, overrides: dict) -> dict:
    options = EvalOptions(device=args.device, trials=args.trials, memory_tier=tier, set_values=overrides,
                          baselines=tuple(b for b in args.baselines.split(",") if b), seed=args.seed)
    record: dict = {"problem": problem.stem, "tier_asked": tier}
    started = time.monotonic()
    index = int(args.device.split(":")[1]) if ":" in args.device else 0
    sampler = GpuPeak(index) if args.device.startswith("cuda") else None
    try:
        with (sampler or contextlib.nullcontext()), Evaluator(problem, options, progress=lambda m: print("   ", m, flush=True),
                                                spare=False, wait_baselines=True) as evaluator:
            evaluation = evaluator.evaluate(candidate)
            plan = evaluator.plan
            prepared = evaluator.prepared
        phases = {name: round(sum(terms.values()) / GB, 2) for name, terms in plan.gpu_phases.items()}
        record.update(status=evaluation.status, message=evaluation.message[:400], tier=plan.tier, truth=plan.truth,
                      workers=plan.workers, baselines_first=plan.baselines_first,
                      plan_gpu_gb=round(plan.gpu_bytes / GB, 2) if plan.gpu_phases else None,
                      plan_gpu_phases_gb=phases, plan_host_gb=round(plan.host_bytes / GB, 2),
                      ground_truth=evaluation.correctness.ground_truth,
                      setup_s=prepared.reference_seconds, sets_s=prepared.sets_seconds,
                      judge_peak_gb=round(prepared.gpu_memory.get("judge_peak", 0) / GB, 2) or None,
                      runtime_ms=evaluation.timing.runtime_ms, eager_ms=evaluation.timing.eager_ms,
                      max_abs_error=evaluation.correctness.max_abs_error,
                      warnings=[w[:200] for w in evaluation.warnings])
    except ProblemError as exc:
        record.update(status="too_large" if "too large" in str(exc) else "problem_error", message=str(exc)[:600])
    record["seconds"] = round(time.monotonic() - started, 1)
    if sampler is not None:
        record["measured_peak_gb"] = round((sampler.peak - sampler.before) / GB, 2)
        record["gpu_in_use_before_gb"] = round(sampler.before / GB, 2)
        record["holders_at_peak"] = sampler.holders
    return record


def table(records: list[dict]) -> str:
    head = (f"{'problem':<20} {'asked':<9} {'verdict':<12} {'tier':<9} {'truth':<7} {'plan GB':>8} "
            f"{'peak GB':>8} {'set-up s':>9} {'total s':>8}  note")
    lines = [head, "-" * len(head)]
    for r in records:
        note = "" if r.get("status") == "ok" else r.get("message", "")[:90]
        lines.append(f"{r['problem']:<20} {r['tier_asked']:<9} {r.get('status', '?'):<12} {r.get('tier', '-'):<9} "
                     f"{r.get('truth', '-'):<7} {_f(r.get('plan_gpu_gb')):>8} {_f(r.get('measured_peak_gb')):>8} "
                     f"{_f(r.get('setup_s')):>9} {_f(r.get('seconds')):>8}  {note}")
    return "\n".join(lines)


def _f(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", default="", help="numbers of the problems (default: all)")
    parser.add_argument("--tiers", default="auto", help="comma-separated: auto, resident, host, per-set")
    parser.add_argument("--baselines", default="eager", help="baselines timed beside each verdict")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--resume", type=Path, help="a previous run's JSON: its runs are kept, not run again")
    args = parser.parse_args()
    from kfoundry.bench.suite import parse_selection
    from kfoundry.problem import parse_set_values

    overrides = parse_set_values(args.set)
    wanted = parse_selection(args.problems) if args.problems else None
    problems = [p for p in sorted(HERE.glob("[0-9]*.py"))
                if wanted is None or int(p.name.split("_")[0]) in wanted]
    import torch
    import triton

    usage = gpu_usage()
    device = next((g.name for g in usage.gpus), "cpu") if args.device.startswith("cuda") else "cpu"
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = args.resume or args.out / f"memory_tiers-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = json.loads(out.read_text()) if args.resume and out.exists() else {
        "device": device, "torch": torch.__version__, "triton": triton.__version__,
        "python": platform.python_version(), "trials": args.trials, "baselines": args.baselines,
        "set": overrides, "runs": []}
    done = {(r["problem"], r["tier_asked"]) for r in doc["runs"]}
    folder = Path(tempfile.mkdtemp(prefix="memory-tiers-"))
    for problem in problems:
        candidate = None
        for tier in [t for t in args.tiers.split(",") if t]:
            if (problem.stem, tier) in done:
                continue
            print(f"{problem.stem} ({tier})", flush=True)
            candidate = candidate or compose_candidate(problem, overrides, folder)
            doc["runs"].append(run_one(problem, candidate, tier, args, overrides))
            out.write_text(json.dumps(doc, indent=1))
            print(table(doc["runs"][-1:]).splitlines()[-1], flush=True)
    print(f"\n{device}, torch {doc['torch']}, triton {doc['triton']}; {args.trials} trials, baselines "
          f"{args.baselines or 'none'}; peak = most GPU memory in use during the run (NVML) less what was in use "
          f"before\n")
    print(table(doc["runs"]))
    print(f"\nwritten to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
