"""Running a bench: every problem of the selection by one method, each in its own run directory
(OUT/runs/<problem>/), bench.json rewritten after each so that a killed bench resumes
(`resume=True`) with its finished problems kept.

The machine is checked first (kfoundry.doctor's cheap checks); an environment fault met on a problem (our
imports, CUDA, GPU memory held by others) is recorded as that problem's `environment_error` and stops the
bench, since the next problem would fail the same way; --resume runs that problem again."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kfoundry.bench import config as bench_config
from kfoundry.bench import outputs
from kfoundry.bench.methods import (OptimizeFn, clear_run_dir, default_optimize, environment_error, fingerprint_file,
                                   resumable, run_problem)
from kfoundry.bench.report import BenchReport
from kfoundry.bench.results import ENVIRONMENT_ERROR, ERROR
from kfoundry.bench.suite import Suite, module_constants
from kfoundry.errors import EnvironmentFault, UsageError
from kfoundry.search.stop import clear_stop_request, request_stop, stop_requested

if TYPE_CHECKING:
    from kfoundry.run_config import RunConfig

Progress = Callable[[str], None]  # a line per problem; lines starting with two spaces are steps within one
RUNS_DIR = "runs"


def problem_set_values(config: RunConfig, path: Path) -> dict[str, Any]:
    """The suite-wide --set values that this problem has a constant for."""
    names = module_constants(path)
    return {k: v for k, v in config.eval.set_values.items() if k in names}


def _check_set_values(suite: Suite, config: RunConfig) -> None:
    defined: set[str] = set()
    for problem in suite.problems:
        defined |= module_constants(problem.path)
    unused = sorted(set(config.eval.set_values) - defined)
    if unused:
        raise UsageError(f"--set {unused[0]}: no problem of the selection has a module-level constant {unused[0]!r}")


def missing_set_values(config: RunConfig, path: Path) -> list[str]:
    """The suite-wide --set names that this problem has no constant for: it runs without them."""
    return sorted(set(config.eval.set_values) - module_constants(path))


def check_machine(config: RunConfig, say: Progress) -> None:
    """kfoundry doctor's cheap checks, once for the whole bench: an EnvironmentFault where every problem
    would fail, a warning line for each risk."""
    from kfoundry.doctor import preflight, stop_or_warn

    devices = config.bench.device_list()
    device = devices[0] if len(set(devices)) == 1 else config.eval.device
    for warning in stop_or_warn(preflight(device, config.eval.sandbox)):
        say(f"warning: environment: {warning}")


def run_bench(suite: Suite, config: RunConfig, out: str | Path, *, resume: bool = False,
              progress: Progress | None = None, optimize_fn: OptimizeFn | None = None,
              write_html: bool = True, finished: Callable[[str], None] | None = None,
              check: bool = True) -> BenchReport:
    """Run (or, with `resume`, finish) a bench; returns its report, also written to `out`.
    A KeyboardInterrupt stops it after saving what is done (`report.interrupted`). `finished` is
    told each problem's name once it is done with (judged, kept from an earlier call, or stopped).

    A --set NAME that a problem has no constant for is said before that problem runs, and the
    problem runs without it (at its own value of what the --set would have changed); a NAME that no
    problem of the selection has is bad usage.

    `check`: the machine first (check_machine). An EnvironmentFault on a problem is saved as its
    environment_error, then raised: the bench stops there."""
    bench_config.validate(config)
    _check_set_values(suite, config)
    method = config.bench.method
    if method == "optimize" and optimize_fn is None:
        optimize_fn = default_optimize()
    say = progress or (lambda message: None)
    done = finished or (lambda name: None)
    out = Path(out)
    previous = outputs.load_results(out)
    if previous and not resume:
        raise UsageError(f"{out} already holds a bench ({len(previous)} problem(s) finished): add --resume to "
                         "continue it, or choose another --out")
    if check:
        check_machine(config, say)
    out.mkdir(parents=True, exist_ok=True)
    report = BenchReport(suite=suite, config=config, out=out)
    selected = {p.name for p in suite.problems}
    report.kept = [r for name, r in previous.items() if name not in selected]
    report.pending = [p.name for p in suite.problems]
    total = len(suite.problems)
    lock = threading.Lock()

    def one(index: int, problem: Any, device: str | None) -> None:
        if stop_requested():
            return  # interrupted before it started: it waits for --resume
        set_values = problem_set_values(config, problem.path)
        fingerprint = bench_config.fingerprint(config, problem.path.read_text(encoding="utf-8"), set_values)
        earlier = previous.get(problem.name)
        # kept unless the machine or the harness failed it (not a verdict on the problem): those run again
        if earlier is not None and earlier.fingerprint == fingerprint and earlier.status not in (ENVIRONMENT_ERROR,
                                                                                                  ERROR):
            with lock:
                report.results.append(earlier)
                report.reused.append(problem.name)
                report.pending.remove(problem.name)
            say(f"[{index}/{total}] {problem.name}: kept from an earlier call ({earlier.status})")
            done(problem.name)
            return
        missing = missing_set_values(config, problem.path)
        if missing:
            say(f"[{index}/{total}] {problem.name}: --set {', '.join(missing)} not applied: the problem has no "
                f"module-level constant {' or '.join(repr(n) for n in missing)}; it runs without "
                + ("it" if len(missing) == 1 else "them"))
        run_dir = out / RUNS_DIR / problem.name
        # a search an interrupted call started, with the same settings: it goes on, its evaluations kept
        going_on = resume and method == "optimize" and resumable(run_dir, fingerprint)
        if not going_on:
            clear_run_dir(run_dir)
            run_dir.parent.mkdir(parents=True, exist_ok=True)
            fingerprint_file(run_dir).write_text(fingerprint + "\n", encoding="utf-8")
        where = f" on {device}" if device else ""
        say(f"  [{index}/{total}] {problem.name}: {method}{where}"
            + (" (resuming its interrupted search)" if going_on else ""))
        local = config if device is None else replace(config, eval=replace(config.eval, device=device))
        started = time.monotonic()
        try:
            result = run_problem(problem, local, run_dir, f"{RUNS_DIR}/{problem.name}", fingerprint, set_values,
                                 progress=lambda m, name=problem.name: say(f"  {name}: {m}"),
                                 optimize_fn=optimize_fn, resume=going_on)
        except EnvironmentFault as fault:
            if len(devices) > 1:
                request_stop()  # before this problem's device is free: no other problem starts on it
            result = environment_error(problem, local, fingerprint, set_values, f"{RUNS_DIR}/{problem.name}", fault,
                                       started)
            say(f"[{index}/{total}] {problem.name}: {ENVIRONMENT_ERROR}{where}: {fault.cause}")
            with lock:
                report.results.append(result)
                report.pending.remove(problem.name)
                report.environment_error = str(fault)
                report.save()
            done(problem.name)
            raise
        if stop_requested() and method == "optimize":  # a search cut short: it runs again with --resume
            say(f"[{index}/{total}] {problem.name}: stopped by the interrupt{where}")
            done(problem.name)
            return
        figure = f", {result.speedup_eager:.3g}x vs eager" if result.speedup_eager is not None else ""
        say(f"[{index}/{total}] {problem.name}: {result.status}{figure} ({result.duration_s:.1f} s){where}")
        with lock:
            report.results.append(result)
            report.pending.remove(problem.name)
            report.save()
        done(problem.name)

    devices = config.bench.device_list()
    try:
        if len(devices) <= 1:
            for index, problem in enumerate(suite.problems, start=1):
                one(index, problem, None)
        else:  # different problems on different devices at once
            from kfoundry.evaluate.parent.pool import DeviceSlots

            slots = DeviceSlots(devices)

            def leased(index: int, problem: Any) -> None:
                with slots.lease() as device:
                    one(index, problem, device)

            clear_stop_request()
            pool = ThreadPoolExecutor(max_workers=len(devices), thread_name_prefix="kfoundry-bench")
            try:
                for future in [pool.submit(leased, i, p) for i, p in enumerate(suite.problems, start=1)]:
                    future.result()
            except KeyboardInterrupt:
                # the searches run in other threads: each stops at its next generation
                say("interrupted: the problems running stop once their evaluations in flight are judged "
                    "(run again with --resume)")
                request_stop()
                raise
            except EnvironmentFault:
                request_stop()  # the other problems would fail the same way: none more starts
                raise
            finally:
                pool.shutdown(wait=True, cancel_futures=stop_requested())
                clear_stop_request()
    except KeyboardInterrupt:
        report.interrupted = True
    report.save()
    if write_html:
        try:
            from kfoundry.bench.html import write_bench_html

            write_bench_html(report)
        except Exception as exc:  # noqa: BLE001 -- the page is a view of bench.json, which is written
            say(f"bench.html not written: {type(exc).__name__}: {exc}")
    return report
