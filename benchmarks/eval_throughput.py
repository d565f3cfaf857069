"""Evaluation throughput at real benchmark scale, on a GPU.

For each problem of benchmarks/throughput/ (kfoundry's own: a 1024x8192x8192 GEMM with an epilogue, a
Conv2d reduced over its channels, a ConvTranspose2d with a 2.1 GB output, the same with GELU and
GroupNorm, a ConvTranspose3d with a BatchNorm), 16 candidates (the composer's variants, then tuner
children of them) are submitted at once to one Evaluator with today's defaults (5 trials, 100 timing
trials, both guard input sets, guard on). Reported per problem: evaluations per minute from the first
submission to the last verdict, the reference set-up's seconds (inputs, expected outputs, their
float64 truth; baselines apart), the baselines' seconds, peak host memory (every process the
evaluator started: private memory, plus its files under /dev/shm and the temp dir) against the
memory plan's prediction, peak GPU memory (nvidia-smi), the verdicts, the mean phase breakdown, and
the merged timeline of every process's GPU phases (from the GPU lock's host-monotonic timestamps):
the count of timed phases that overlapped any other GPU phase must be 0.

Timing fidelity in the same run (--fidelity): for pointwise_chain and layernorm, the example kernel
is submitted 5 times among 8 other candidates that compile and check meanwhile; the spread of its 5
medians (each from its own worker process) and the eager baseline against triton.testing.do_bench.

    python benchmarks/eval_throughput.py [--problems a,b] [--candidates 16] [--fidelity] [--resume]
                                         [--workers N] [--json benchmarks/results/eval_throughput-....json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from kfoundry.evaluate import EvalOptions, Evaluator  # noqa: E402
from kfoundry.evaluate.parent.host_memory import MemorySampler  # noqa: E402
from kfoundry.evaluate.timing.gpu_lock import ENV_TIMELINE, concurrency, exclusive_overlaps, read_timeline, render_timeline  # noqa: E402

PROBLEMS = ROOT / "benchmarks" / "throughput"
PHASES = ("worker_wait_s", "compile_s", "correctness_s", "guard_s", "timing_s", "judge_s", "judge_lock_wait_s",
          "judge_serve_s", "candidate_total_s", "exclusive_timer_setup_s", "exclusive_timing_s",
          "exclusive_peak_memory_s")


def host_sampler() -> MemorySampler:
    """Our child processes' private memory plus our kfoundry-* folders, every 50 ms."""
    sampler = MemorySampler(interval_s=0.05)
    sampler.watch_children(os.getpid())
    for root in ("/dev/shm", tempfile.gettempdir()):
        sampler.watch_prefix(root, "kfoundry-")
    return sampler


class GpuPeak:
    """Peak device memory in use, from nvidia-smi every 200 ms."""

    def __init__(self) -> None:
        self.peak_mib = None
        self._proc = None

    def __enter__(self):
        try:
            self._proc = subprocess.Popen(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                                           "-lms", "200"], stdout=subprocess.PIPE, text=True)
            self._thread = threading.Thread(target=self._read, daemon=True)
            self._thread.start()
        except OSError:
            self._proc = None
        return self

    def _read(self) -> None:
        for line in self._proc.stdout:
            try:
                value = int(line.strip().split()[0])
            except (ValueError, IndexError):
                continue
            self.peak_mib = max(self.peak_mib or 0, value)

    def __exit__(self, *exc):
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait()


def candidates_for(problem: Path, count: int, folder: Path, rng: random.Random) -> list[Path]:
    """The composer's variants, then tuner children of them, as files."""
    from kfoundry.experts.composer import compose
    from kfoundry.experts.tuner import tune
    from kfoundry.source_identity import source_hash

    sources = [c.source for c in compose(problem, max_variants=8).candidates][:count]
    seen = {source_hash(s) for s in sources}
    parents = list(sources)
    while len(sources) < count and parents:
        for parent in list(parents):
            for variant in tune(parent, rng, n=3):
                if source_hash(variant.source) not in seen and len(sources) < count:
                    seen.add(source_hash(variant.source))
                    sources.append(variant.source)
            if len(sources) >= count:
                break
        else:
            break
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, source in enumerate(sources):
        path = folder / f"{problem.stem}_c{i:02d}.py"
        path.write_text(source)
        paths.append(path)
    return paths


def gpu_time(spans: list, first: float, last: float) -> dict:
    """Where the GPU's time went between the first submission and the last verdict: seconds held exclusive
    (candidates' timings, the baselines'), seconds some shared phase was held, seconds nothing was."""
    def union(intervals: list[tuple[float, float]]) -> float:
        total, end = 0.0, float("-inf")
        for a, b in sorted(intervals):
            a, b = max(a, first, end), min(b, last)
            if b > a:
                total += b - a
                end = b
        return total

    exclusive = [(s.start, s.end) for s in spans if s.mode == "exclusive"]
    timings = [s.end - s.start for s in spans if s.mode == "exclusive" and s.label == "candidate"]
    shared_only = union([(s.start, s.end) for s in spans]) - union(exclusive)
    window = last - first
    return {"exclusive_s": round(union(exclusive), 2), "shared_only_s": round(shared_only, 2),
            "idle_s": round(window - union([(s.start, s.end) for s in spans]), 2),
            "candidate_timing_s_mean": round(statistics.mean(timings), 3) if timings else None}


def run_problem(problem: Path, count: int, out_dir: Path, options: EvalOptions) -> dict:
    timeline = out_dir / f"timeline-{problem.stem}.jsonl"
    timeline.unlink(missing_ok=True)
    os.environ[ENV_TIMELINE] = str(timeline)
    rng = random.Random(0)
    files = candidates_for(problem, count, out_dir / "candidates" / problem.stem, rng)
    log: list[tuple[float, str]] = []
    t0 = time.monotonic()

    def progress(message: str) -> None:
        log.append((round(time.monotonic() - t0, 2), message))
        if message.startswith("reference") or message.endswith((": ok", "wrong_output", "cheating", "crash",
                                                                "timeout", "compile_error", "runtime_error")):
            print(f"  [{time.monotonic() - t0:7.1f} s] {message}", flush=True)

    row: dict = {"problem": problem.stem, "candidates": len(files)}
    with host_sampler() as host, GpuPeak() as gpu:
        with Evaluator(problem, options, progress=progress) as evaluator:
            started = time.monotonic()
            prepared = evaluator.prepare()
            row["prepare_s"] = round(time.monotonic() - started, 2)
            row["reference_setup_s"] = prepared.reference_seconds
            row["plan"] = evaluator.plan.to_dict()
            first = time.monotonic()
            spans: list[list] = []

            def evaluate(path: Path):
                begun = time.monotonic()
                evaluation = evaluator.evaluate(path)
                spans.append([path.stem[-3:], round(begun - first, 2), round(time.monotonic() - first, 2),
                              evaluation.status])
                return evaluation

            with ThreadPoolExecutor(max_workers=evaluator.slots + 2) as pool:  # as optimize's queue
                evaluations = list(pool.map(evaluate, files))
            last = time.monotonic()
            # each candidate's submission and verdict, from the first submission: the run's critical path
            row["candidate_spans"] = sorted(spans, key=lambda span: span[1])
            row["verdicts_before_compile_baseline"] = sum(bool(e.timing.baselines_pending) for e in evaluations)
            for evaluation in evaluations:  # their torch.compile figures, measured after their verdicts
                evaluator.complete(evaluation)
            baselines = prepared.baselines or {}
            row["baselines_s"] = getattr(prepared._baselines, "seconds", None)
            row["baselines_cached"] = bool(baselines.get("cached"))
            row["eager_ms"] = (baselines.get("stats", {}).get("eager") or {}).get("median_ms")
            row["compile_ms"] = (baselines.get("stats", {}).get("compile") or {}).get("median_ms")
            row["workers"] = evaluator.slots
    row["evals_per_min"] = round(len(evaluations) / ((last - first) / 60), 2)
    row["span_s"] = round(last - first, 2)
    row["peak_host_gb"] = round(host.peak / 1e9, 2)
    row["peak_host_parts_gb"] = {name: round(size / 1e9, 3) for name, size in
                                 sorted(host.peak_parts.items(), key=lambda item: -item[1])}
    # the process that drives the evaluator (the main process of a kfoundry run): its high-water mark so far
    row["main_process_max_rss_gb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9, 2)
    row["predicted_host_gb"] = round(row["plan"]["host_bytes"] / 1e9, 2)
    row["peak_gpu_gb"] = round(gpu.peak_mib * 2**20 / 1e9, 2) if gpu.peak_mib else None
    row["verdicts"] = {}
    for e in evaluations:
        row["verdicts"][e.status] = row["verdicts"].get(e.status, 0) + 1
    row["failures"] = [e.message[:300] for e in evaluations if e.status != "ok"][:4]
    ok = [e for e in evaluations if e.ok and e.timing.runtime_ms]
    row["best_ms"] = min((e.timing.runtime_ms for e in ok), default=None)
    row["phases_mean_s"] = {k: round(statistics.mean(e.durations_s.get(k, 0.0) for e in evaluations), 3)
                            for k in PHASES}
    judge_parts = ("judge_open_s", "judge_inputs_s", "judge_compare_s", "judge_pattern_s", "judge_repeat_s",
                   "judge_fill_s")  # the comparisons' serving, summed per candidate (judge_job._compare)
    row["judge_parts_mean_s"] = {k[len("judge_"):]: round(statistics.mean(e.durations_s.get(k, 0.0)
                                                                          for e in evaluations), 3)
                                 for k in judge_parts}
    worker_keys = sorted({k for e in evaluations for k in e.durations_s if k.startswith("worker_") and k != "worker_wait_s"})
    row["worker_seconds_mean"] = {k[len("worker_"):]: round(statistics.mean(e.durations_s.get(k, 0.0) for e in evaluations), 3)
                                  for k in worker_keys}
    row["timing_warmup_s_mean"] = round(statistics.mean(
        [e.timing.candidate.warmup_s or 0.0 for e in ok if e.timing.candidate] or [0.0]), 3)
    best_compile = [e.timing.speedup_compile for e in ok if e.timing.speedup_compile]
    row["best_speedup_compile"] = round(max(best_compile), 3) if best_compile else None
    spans = read_timeline(timeline)
    row["timeline"] = {"spans": len(spans), "timed_overlaps": len(exclusive_overlaps([s for s in spans if s.released])),
                       "max_shared_at_once": concurrency(spans, "shared"), **gpu_time(spans, first, last),
                       # a long shared hold stalls everyone: a timing that waits for it holds back later requests
                       "longest_shared": [[s.label, s.phase, round(s.end - s.start, 2)] for s in sorted(
                           (s for s in spans if s.mode == "shared"), key=lambda s: s.start - s.end)[:5]]}
    (out_dir / f"timeline-{problem.stem}.txt").write_text(render_timeline(spans, width=160))
    row["log_tail"] = log[-5:]
    return row


def fidelity(example: str, out_dir: Path, options: EvalOptions) -> dict:
    """The example's kernel 5 times among 8 others; the spread of its medians; eager vs do_bench."""
    import torch
    import triton.testing

    from kfoundry import problem as problems

    problem = ROOT / "examples" / example / "problem.py"
    kernel = ROOT / "examples" / example / "kernel.py"
    others = candidates_for(problem, 8, out_dir / "candidates" / f"fid-{example}", random.Random(1))
    order = [kernel, others[0], others[1], kernel, others[2], others[3], kernel, others[4], others[5], kernel,
             others[6], others[7], kernel] if len(others) >= 8 else [kernel] * 5 + others
    with Evaluator(problem, EvalOptions(**{**vars(options), "no_cache": True})) as evaluator:
        evaluator.prepare()
        with ThreadPoolExecutor(max_workers=evaluator.slots) as pool:
            evaluations = list(pool.map(evaluator.evaluate, order))
        eager = (evaluator.prepared.baselines["stats"].get("eager") or {}).get("median_ms")
        seeds = evaluator.trial_seeds
    medians = [e.timing.runtime_ms for e, path in zip(evaluations, order) if path == kernel and e.ok]
    source = problems.read_problem(problem, {})
    module = problems.load_problem_module(source)
    init = problems.init_inputs_of(module)
    model = problems.build_model(module.Model, init, 0, torch.float32, "cuda", False)
    with torch.device("cuda"):
        inputs = problems.make_inputs(module, seeds[0], torch.float32, "cuda")
    with torch.no_grad():
        bench_ms = triton.testing.do_bench(lambda: model(*inputs), warmup=100, rep=500, return_mode="median")
    del model, inputs
    torch.cuda.empty_cache()
    spread = (max(medians) - min(medians)) / statistics.median(medians) if len(medians) > 1 else None
    return {"example": example, "kernel_medians_ms": medians, "spread": spread, "eager_ms": eager,
            "do_bench_ms": bench_ms, "eager_vs_do_bench": eager / bench_ms - 1 if eager else None,
            "others_verdicts": [e.status for e, p in zip(evaluations, order) if p != kernel]}


def optimize_rate(problem: Path, out_dir: Path, max_evals: int) -> dict:
    """`kfoundry optimize --llm none --max-evals N` on the problem; evaluations per minute from its events
    (first evaluation started to last verdict) and over the whole call."""
    from kfoundry.runs import RunStore

    run_dir = out_dir / f"optimize-{problem.stem}"
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "kfoundry", "optimize", str(problem), "--llm", "none",
                           "--max-evals", str(max_evals), "-o", str(run_dir), "--no-library"],
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, capture_output=True, text=True)
    wall = time.monotonic() - started
    with RunStore.open(run_dir) as store:
        evaluated = [e["ts"] for e in store.events("evaluated")]
        proposed = [e["ts"] for e in store.events() if e["kind"] in ("proposed", "evaluated")]
    result = json.loads((run_dir / "result.json").read_text()) if (run_dir / "result.json").exists() else {}
    span = (max(evaluated) - min(proposed)) if evaluated else None
    return {"problem": problem.stem, "evaluations": len(evaluated), "search_span_s": span,
            "evals_per_min_search": round(len(evaluated) / (span / 60), 2) if span else None,
            "wall_s": round(wall, 1), "evals_per_min_call": round(len(evaluated) / (wall / 60), 2),
            "best": result.get("best"), "stop_reason": result.get("stop_reason"), "exit": done.returncode,
            "stderr_tail": done.stderr[-1500:]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", default=None, help="names of benchmarks/throughput/*.py, comma-separated")
    parser.add_argument("--candidates", type=int, default=16)
    parser.add_argument("--fidelity", action="store_true")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--resume", action="store_true", help="keep problems already in --json")
    parser.add_argument("--optimize", default=None, help="also run kfoundry optimize on this throughput problem")
    parser.add_argument("--max-evals", type=int, default=32)
    parser.add_argument("--workers", type=int, default=None, help="candidate workers per GPU (default: the memory plan's)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--work", default=str(ROOT / "kfoundry-runs" / "eval_throughput"))
    args = parser.parse_args()
    import torch
    import triton

    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%MZ")
    out_json = Path(args.json or ROOT / "benchmarks" / "results" / f"eval_throughput-h200-{stamp}.json")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    record = json.loads(out_json.read_text()) if args.resume and out_json.exists() else {"rows": [], "fidelity": []}
    record.update(device=torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
                  torch=torch.__version__, triton=triton.__version__, python=platform.python_version(),
                  cores=os.cpu_count(), settings="defaults: 5 trials, 100 timing trials, guard on, eager+compile")
    options = EvalOptions(device="cuda", workers=args.workers)
    names = args.problems.split(",") if args.problems else sorted(p.stem for p in PROBLEMS.glob("*.py"))
    done = {r["problem"] for r in record["rows"]}
    if not args.skip_throughput:
        for name in names:
            if name in done:
                continue
            print(f"== {name}", flush=True)
            try:
                row = run_problem(PROBLEMS / f"{name}.py", args.candidates, work, options)
            except Exception as exc:  # noqa: BLE001 -- one problem's failure is a row, the rest go on
                row = {"problem": name, "error": f"{type(exc).__name__}: {exc}"}
            record["rows"].append(row)
            out_json.parent.mkdir(parents=True, exist_ok=True)
            out_json.write_text(json.dumps(record, indent=2))
            print(json.dumps({k: row.get(k) for k in ("evals_per_min", "reference_setup_s", "baselines_s",
                                                      "peak_host_gb", "predicted_host_gb", "peak_gpu_gb",
                                                      "verdicts", "timeline", "workers", "error", "phases_mean_s",
                                                      "worker_seconds_mean", "judge_parts_mean_s",
                                                      "candidate_spans")}), flush=True)
    if args.fidelity:
        for example in ("pointwise_chain", "layernorm"):
            print(f"== fidelity {example}", flush=True)
            try:
                result = fidelity(example, work, options)
            except Exception as exc:  # noqa: BLE001
                result = {"example": example, "error": f"{type(exc).__name__}: {exc}"}
            record["fidelity"].append(result)
            out_json.write_text(json.dumps(record, indent=2))
            print(json.dumps(result), flush=True)
    if args.optimize:
        print(f"== optimize {args.optimize}", flush=True)
        result = optimize_rate(PROBLEMS / f"{args.optimize}.py", work, args.max_evals)
        record.setdefault("optimize", []).append(result)
        out_json.write_text(json.dumps(record, indent=2))
        print(json.dumps({k: v for k, v in result.items() if k != "stderr_tail"}), flush=True)
    print()
    print(f"{'problem':26} {'evals/min':>9} {'ref s':>6} {'base s':>7} {'host GB':>8} {'pred GB':>8} "
          f"{'GPU GB':>7} {'workers':>7} {'overlaps':>8} {'excl s':>7} {'idle s':>7}  verdicts")
    for r in record["rows"]:
        if "error" in r:
            print(f"{r['problem']:26} error: {r['error'][:80]}")
            continue
        print(f"{r['problem']:26} {r['evals_per_min']:9.1f} {r['reference_setup_s'] or 0:6.1f} "
              f"{r['baselines_s'] or 0:7.1f} {r['peak_host_gb']:8.2f} {r['predicted_host_gb']:8.2f} "
              f"{r['peak_gpu_gb'] or 0:7.1f} {r['workers']:7d} {r['timeline']['timed_overlaps']:8d} "
              f"{r['timeline'].get('exclusive_s', 0):7.1f} {r['timeline'].get('idle_s', 0):7.1f}  {r['verdicts']}")
    for f in record["fidelity"]:
        if "error" not in f:
            print(f"fidelity {f['example']}: spread {f['spread']:.2%}, eager {f['eager_ms']:.4f} ms vs do_bench "
                  f"{f['do_bench_ms']:.4f} ms ({f['eager_vs_do_bench']:+.2%})")
    print(f"wrote {out_json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
