"""Does the CPU load of our other processes move a candidate's timing? On a GPU.

The search times a candidate while other workers compile theirs (Triton's compiles, launcher builds, the
baseline process's torch.compile): timing has the GPU to itself (the GPU lock), not the host. On one H100 the
generation-0 bests of 11 problems, timed again alone after their searches (programmatic_suite --confirm-gain),
came out 0-36% faster than the search had timed them while their finals agreed within 1-5%: a gain read as the
final over generation 0 carried the difference.

This times the same candidates through the evaluator (sandboxed workers, the search's own timer) with the host
idle and with LOAD processes of our own beside the worker: `spin:N`, N pure Python busy loops; `pycompile:N`, N
loops compiling a large Python source (CPU and allocation, as a compile is). The loads start after the
evaluator has prepared (reference and baselines timed with the host idle) and run through each evaluation.
Rounds alternate the loads, so that a drift of the machine shows in every column.

    python benchmarks/timing_under_load.py PROBLEM CANDIDATE [CANDIDATE ...] [--loads none,spin:14]
        [--rounds 2] [--timeout 600] [--json PATH]

Prints a table: per candidate and load, the medians of each round, the spread of the trials (IQR over median)
and the SM clocks; each round's line (stderr) and the JSON add the event and host medians, the profiler's sum of kernel
durations (no host time in it) and the host's time to queue the call (above the timer's 0.2 ms lead, the GPU waited
for the host inside the events). Exit code 0 when every evaluation was timed, 1 when one was
not, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

LOAD_KINDS = {
    "spin": "while True:\n    pass\n",
    "pycompile": "source = 'x = [i * 2 for i in range(10)]\\n' * 20000\nwhile True:\n    compile(source, 's', 'exec')\n",
}


@dataclass(frozen=True)
class Load:
    kind: str  # "none" or a key of LOAD_KINDS
    processes: int = 0

    @property
    def name(self) -> str:
        return "none" if self.kind == "none" else f"{self.kind}:{self.processes}"

    def start(self) -> list[subprocess.Popen]:
        if self.kind == "none":
            return []
        return [subprocess.Popen([sys.executable, "-c", LOAD_KINDS[self.kind]], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                for _ in range(self.processes)]


def parse_load(text: str) -> Load:
    text = text.strip()
    if text == "none":
        return Load("none")
    kind, _, count = text.partition(":")
    if kind not in LOAD_KINDS or not count.isdigit() or int(count) < 1:
        raise ValueError(f"load {text!r}: none, or KIND:N with KIND one of {', '.join(LOAD_KINDS)} and N >= 1")
    return Load(kind, int(count))


def stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        process.kill()
    for process in processes:
        process.wait()


def measured(verdict: Any) -> dict[str, Any]:
    """One evaluation's timing as a row: status, median, event and host medians, IQR / median, SM clocks."""
    stats = verdict.timing.candidate
    row: dict[str, Any] = {"status": verdict.status, "ms": verdict.timing.runtime_ms}
    if stats is not None:
        row.update(event_ms=stats.event_median_ms, host_ms=stats.host_median_ms, enqueue_ms=stats.enqueue_median_ms,
                   iqr=(stats.q3_ms - stats.q1_ms) / stats.median_ms if stats.median_ms else None,
                   clocks=stats.sm_clock_mhz, trials=stats.trials)
    from timing_fidelity import kernel_us

    kernels = kernel_us(verdict)
    if kernels is not None:
        row["kernels_ms"] = kernels / 1e3  # the profiler's kernel durations: no host in them
    if verdict.status != "ok":
        row["message"] = (verdict.message or "")[:200]
    return row


def measure(problem: Path, candidates: list[Path], loads: list[Load], rounds: int, timeout_s: float,
            say) -> list[dict[str, Any]]:
    from kfoundry.evaluate import EvalOptions, Evaluator

    options = EvalOptions(trials=1, baselines=("eager",), timeout_s=timeout_s)
    rows = []
    with Evaluator(problem, options) as evaluator:
        evaluator.prepare()
        for round_ in range(rounds):
            order = loads if round_ % 2 == 0 else list(reversed(loads))
            for load in order:
                for candidate in candidates:
                    processes = load.start()
                    try:
                        time.sleep(1.0 if processes else 0.0)  # the load is running before the worker starts
                        verdict = evaluator.evaluate(candidate)
                    finally:
                        stop(processes)
                    row = {"candidate": str(candidate), "load": load.name, "round": round_, **measured(verdict)}
                    say(f"round {round_ + 1} {load.name:>12} {candidate.name}: {row['status']} "
                        f"{_ms(row['ms'])} ms (event {_ms(row.get('event_ms'))}, host {_ms(row.get('host_ms'))}, "
                        f"kernels {_ms(row.get('kernels_ms'))}, queued in {_ms(row.get('enqueue_ms'))})")
                    rows.append(row)
    return rows


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def table(rows: list[dict[str, Any]], loads: list[Load]) -> str:
    """Per candidate: each load's median over rounds and its ratio to the first load's."""
    lines = [f"{'candidate':<40} {'load':>12} {'median ms':>10} {'rounds':>24} {'vs ' + loads[0].name:>10} "
             f"{'IQR':>6} {'clocks MHz':>12}"]
    for candidate in dict.fromkeys(r["candidate"] for r in rows):
        base = None
        for load in loads:
            mine = [r for r in rows if r["candidate"] == candidate and r["load"] == load.name]
            times = [r["ms"] for r in mine if r["ms"]]
            if not times:
                lines.append(f"{Path(candidate).name:<40} {load.name:>12} {'not timed':>10}")
                continue
            median = statistics.median(times)
            base = median if base is None and load is loads[0] else base
            iqr = statistics.median(r["iqr"] for r in mine if r.get("iqr") is not None) if any(
                r.get("iqr") is not None for r in mine) else None
            clocks = {c for r in mine for c in (r.get("clocks") or []) if c}
            lines.append(f"{Path(candidate).parent.parent.name[:28] + '/' + Path(candidate).name:<40} "
                         f"{load.name:>12} {median:>10.4f} {' '.join(f'{t:.4f}' for t in times):>24} "
                         f"{(median / base if base else float('nan')):>9.3f}x "
                         f"{'-' if iqr is None else f'{iqr:.1%}':>6} "
                         f"{'-'.join(str(c) for c in sorted(clocks)) or '-':>12}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problem", type=Path)
    parser.add_argument("candidates", type=Path, nargs="+")
    parser.add_argument("--loads", default="none,spin:14", help="comma-separated: none, spin:N, pycompile:N")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for one evaluation")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        loads = [parse_load(item) for item in args.loads.split(",") if item.strip()]
    except ValueError as error:
        parser.error(str(error))
    missing = [p for p in [args.problem, *args.candidates] if not p.is_file()]
    if missing or not loads or args.rounds < 1:
        parser.error(f"not a file: {', '.join(map(str, missing))}" if missing else "need a load and a round")
    say = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    say(f"{os.cpu_count()} CPU cores; loads {', '.join(l.name for l in loads)}; {args.rounds} round(s)")
    rows = measure(args.problem, args.candidates, loads, args.rounds, args.timeout, say)
    if args.json:
        args.json.write_text(json.dumps({"problem": str(args.problem), "cpu_cores": os.cpu_count(),
                                         "rows": rows}, indent=1) + "\n", encoding="utf-8")
    print(table(rows, loads))
    return 0 if all(r["ms"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
