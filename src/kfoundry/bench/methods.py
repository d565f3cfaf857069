"""Running one problem of a bench by each method:

- reference: the problem's Model evaluated as its own ModelNew (guard skipped: there is no custom
  kernel), a check of the harness: every problem correct, speedups near 1;
- solutions: a problem's ready-made candidate files (KernelBench's samples: every
  level_L_problem_N_sample_K_kernel.py), each judged with the guard and timed; the problem reports the
  fastest correct one (best of k) with pass@k over them;
- optimize: a whole search per problem (kfoundry.optimize.optimize), in the problem's run dir.

The evaluation methods leave a run store in the problem's run dir too (one candidate, one
evaluation), so `kfoundry report` works on it like on an optimize run."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kfoundry.bench import results as R
from kfoundry.bench.floor import Floor, floor_of
from kfoundry.bench.metrics import OUR_EXPERTS, is_out_of_resource
from kfoundry.bench.results import (FIGURES, CandidateResult, ProblemResult, SampleResult, labels_from_evaluation,
                                   labels_from_run_result)
from kfoundry.bench.config import describe
from kfoundry.bench.suite import SolutionFile, SuiteProblem, find_samples, solution_candidates
from kfoundry.errors import CandidateFileError, EnvironmentFault, ProblemError, UsageError
from kfoundry.evaluate.parent.options import EvalOptions
from kfoundry.problem import read_problem

if TYPE_CHECKING:
    from kfoundry.run_config import RunConfig

OptimizeFn = Callable[..., dict[str, Any]]
Progress = Callable[[str], None]
REFERENCE_POLICY = "none: guard skipped (the reference against itself)"


def problem_options(config: RunConfig, set_values: dict[str, Any]) -> EvalOptions:
    """The evaluation options for one problem: its own --set values; --time-per-problem bounds
    the candidate's and the reference's time; no guard for the reference method."""
    options = dataclasses.replace(config.eval, set_values=dict(set_values))
    if config.bench.method == "reference":
        options.guard = False
    limit = config.bench.time_per_problem
    if limit is not None and config.bench.method != "optimize":
        options.timeout_s = min(options.timeout_s, limit)
        options.reference_timeout_s = min(options.reference_timeout_s, limit)
    return options


def reference_candidate(problem: Path, set_values: dict[str, Any]) -> str:
    """The problem's own code with `ModelNew = Model`: with the --set values applied, so that
    constants its Model reads directly are the ones the reference uses."""
    source = read_problem(problem, set_values)
    text = ast.unparse(source.syntax_tree()) if set_values else source.text
    return text.rstrip("\n") + "\n\n\nModelNew = Model  # the reference against itself (kfoundry bench)\n"


def _base(problem: SuiteProblem, config: RunConfig, fingerprint: str, set_values: dict[str, Any],
          run_dir: str) -> ProblemResult:
    return ProblemResult(name=problem.name, path=str(problem.path), number=problem.number, status=R.ERROR,
                         message="", method=config.bench.method, fingerprint=fingerprint, set_values=set_values,
                         run_dir=run_dir, compiled=False)


def run_problem(problem: SuiteProblem, config: RunConfig, run_dir: Path, rel_run_dir: str,
                fingerprint: str, set_values: dict[str, Any], *, progress: Progress,
                optimize_fn: OptimizeFn | None = None, resume: bool = False) -> ProblemResult:
    """One problem, by the bench's method; every failure becomes the problem's status and message.
    `resume`: the search in run_dir was cut short, with these settings: it goes on (optimize --resume)."""
    result = _base(problem, config, fingerprint, set_values, rel_run_dir)
    started = time.monotonic()
    try:
        if config.bench.method == "optimize":
            _optimize(problem, config, run_dir, set_values, result, optimize_fn, progress, resume)
        else:
            _evaluate(problem, config, run_dir, set_values, result, progress)
    except ProblemError as exc:
        from kfoundry.evaluate.parent.memory_plan import is_too_large

        result.status = R.TOO_LARGE if is_too_large(exc) else R.PROBLEM_ERROR
        result.message, result.compiled = str(exc), False
    except (UsageError, EnvironmentFault):
        raise  # bad settings, or a machine that fails: the same for every problem, so the bench stops
    except Exception as exc:  # noqa: BLE001 -- one problem's fault never ends the bench
        result.status, result.message, result.compiled = R.ERROR, f"{type(exc).__name__}: {exc}", False
    result.duration_s = round(time.monotonic() - started, 3)
    result.finished_at = time.time()
    return result


# -- reference and solutions ----------------------------------------------------------------------

def _evaluate(problem: SuiteProblem, config: RunConfig, run_dir: Path, set_values: dict[str, Any],
              result: ProblemResult, progress: Progress) -> None:
    """The reference, or every solution file of the problem (each of KernelBench's samples), judged by one
    evaluator; with several samples each gets run_dir/sample_K and the problem reports the best."""
    from kfoundry.evaluate import Evaluator

    options = problem_options(config, set_values)
    solutions = config.bench.method == "solutions"
    with tempfile.TemporaryDirectory(prefix="kfoundry-bench-") as scratch:
        if solutions:
            files = find_samples(problem, config.bench.solutions)
            if not files:
                looked = ", ".join(str(p) for p in solution_candidates(problem, config.bench.solutions))
                result.status, result.message = R.NO_SOLUTION, f"no solution file (looked for {looked})"
                result.compiled = False
                return
        else:
            candidate = Path(scratch) / f"{problem.name}_reference.py"
            candidate.write_text(reference_candidate(problem.path, set_values), encoding="utf-8")
            files = [SolutionFile(0, candidate)]
        samples, records = [], {}
        with Evaluator(problem.path, options, progress=progress, spare=False, wait_baselines=True) as evaluator:
            for file in files:
                where = run_dir if len(files) == 1 else run_dir / f"sample_{file.sample_id}"
                sample = SampleResult(sample_id=file.sample_id, status=R.ERROR,
                                      candidate=str(file.path) if solutions else None,
                                      run_dir=str(Path(result.run_dir or "") / where.relative_to(run_dir)))
                if len(files) > 1:
                    progress(f"sample {file.sample_id} ({len(samples) + 1} of {len(files)}): {file.path.name}")
                started = time.monotonic()
                records[file.sample_id] = _judge(evaluator, problem, config, file.path, where, sample)
                sample.duration_s = round(time.monotonic() - started, 3)
                samples.append(sample)
    result.evaluations = sum(record is not None for record in records.values())
    if solutions:
        result.samples = samples
        result.choose_best_sample()
    else:
        result.take_figures(samples[0])
    reported = records.get(result.best_sample if solutions else 0)
    if solutions and result.correct and config.search.check_sizes:
        from kfoundry.evaluate.parent.size_check import check_sizes
        from kfoundry.types import to_jsonable

        best = next(f for f in files if f.sample_id == result.best_sample)
        result.other_sizes = to_jsonable(check_sizes(problem.path, best.path, options, progress=progress))
    if reported is not None:
        result.labels = labels_from_evaluation(reported)
    else:  # no sample was judged: the labels of any that was
        result.labels = next((labels_from_evaluation(r) for r in records.values() if r is not None), {})
    result.floor = first_floor([reported, *records.values()])


def first_floor(evaluations: Iterable[dict[str, Any] | None]) -> Floor | None:
    """The problem's floor from the first of its evaluations that gives one (they share cost and device)."""
    return next((floor for floor in map(floor_of, evaluations) if floor is not None), None)


def environment_error(problem: SuiteProblem, config: RunConfig, fingerprint: str, set_values: dict[str, Any],
                      run_dir: str, fault: EnvironmentFault, started: float) -> ProblemResult:
    """The record of the problem that met an environment fault: no verdict, the fault's message."""
    result = _base(problem, config, fingerprint, set_values, run_dir)
    result.status, result.message = R.ENVIRONMENT_ERROR, str(fault)
    result.duration_s = round(time.monotonic() - started, 3)
    result.finished_at = time.time()
    return result


def _judge(evaluator: Any, problem: SuiteProblem, config: RunConfig, candidate: Path, run_dir: Path,
           sample: SampleResult) -> dict[str, Any] | None:
    """One candidate file: its verdict into `sample`, its run store into run_dir; the Evaluation's record,
    or None when the file could not be read as a candidate."""
    try:
        source = candidate.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        sample.status, sample.message = R.NO_SOLUTION, f"cannot read the solution file {candidate}: {exc}"
        sample.compiled = False
        return None
    try:
        evaluation = evaluator.evaluate(candidate)
    except CandidateFileError as exc:
        sample.status, sample.message, sample.compiled = R.NO_SOLUTION, str(exc), False
        return None
    record = evaluation.to_dict()
    if config.bench.method == "reference":  # the guard did not run: say so wherever the record goes
        record["settings"].update(guard=False, policy=REFERENCE_POLICY)
    sample.read_evaluation(record)
    try:
        _store_run(problem, config, run_dir, source, record, evaluation.settings.get("seed") or 0)
    except Exception as exc:  # noqa: BLE001 -- the verdict stands without its run dir
        sample.message += f" [run dir not written: {type(exc).__name__}: {exc}]"
    return record


def _store_run(problem: SuiteProblem, config: RunConfig, run_dir: Path, source: str,
               record: dict[str, Any], seed: int) -> None:
    """A run store with the one candidate and its evaluation, its outputs and its report."""
    from kfoundry.runs import RunStore
    from kfoundry.runs.outputs import write_outputs

    expert = "reference" if config.bench.method == "reference" else "solution"
    with RunStore.create(run_dir, problem.path, {"bench": describe(config)}, seed=seed) as store:
        candidate_id = store.add_candidate(source, [], expert, 0, 0, "seed")
        store.finish_evaluation(store.start_evaluation(candidate_id), record)
        store.event("bench_evaluation", method=config.bench.method, candidate_id=candidate_id)
        write_outputs(store, record.get("device_facts") or {"kind": record.get("device")})
    write_report_quietly(run_dir)


def write_report_quietly(run_dir: Path) -> None:
    """The per-problem report; a fault in it never costs the problem's result."""
    try:
        from kfoundry.runs.report import write_report

        write_report(run_dir)
    except Exception as exc:  # noqa: BLE001
        (run_dir / "report_error.txt").write_text(f"{type(exc).__name__}: {exc}\n", encoding="utf-8")


# -- optimize -------------------------------------------------------------------------------------

def default_optimize() -> OptimizeFn:
    """kfoundry.optimize.optimize, imported when a bench needs it."""
    try:
        from kfoundry.optimize import optimize
    except ImportError as exc:
        raise UsageError(f"--method optimize needs kfoundry.optimize, which cannot be imported here ({exc})") \
            from exc
    return optimize


def _optimize(problem: SuiteProblem, config: RunConfig, run_dir: Path, set_values: dict[str, Any],
              result: ProblemResult, optimize_fn: OptimizeFn | None, progress: Progress | None = None,
              resume: bool = False) -> None:
    optimize = optimize_fn or default_optimize()  # the runner resolves it first: this is for direct calls
    extra: dict[str, Any] = {"progress": progress} if progress is not None and optimize_fn is None else {}
    if _takes(optimize, "preflight"):
        extra["preflight"] = False  # the bench checked the machine once, as it started
    search = config.search
    budget = {"max_evals": search.max_evals, "max_time_s": config.bench.time_per_problem,
              "max_cost": search.max_cost, "target_speedup": search.target_speedup,
              "check_sizes": search.check_sizes}
    if resume:  # its settings are the run's own; its finished evaluations are kept
        record = optimize(resume=run_dir, quiet=True, **budget, **extra)
    else:
        record = optimize(problem.path, out=run_dir, options=problem_options(config, set_values), llm=search.llm,
                          quiet=True, **budget, **extra)
    apply_run_result(result, record)
    result.out_of_resource = count_out_of_resource(run_dir)
    result.other_sizes = (record.get("best") or {}).get("other_sizes")
    if result.correct:
        _read_best_evaluation(result, run_dir)
    result.floor = run_floor(run_dir)
    if not (run_dir / "report.html").exists():
        write_report_quietly(run_dir)


def _takes(function: Callable[..., Any], name: str) -> bool:
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
    return name in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def count_out_of_resource(run_dir: Path) -> int | None:
    """The run's evaluations of our own experts' candidates (metrics.OUR_EXPERTS) that failed out of resource;
    None where the run store cannot be read."""
    from kfoundry.errors import KFoundryError
    from kfoundry.runs import RunStore

    try:
        with RunStore.open(run_dir, resume=False) as store:
            experts = {c["id"]: c["expert"] for c in store.candidates()}
            evaluations = store.finished_evaluations()
    except KFoundryError:
        return None
    return sum(experts.get(candidate) in OUR_EXPERTS and is_out_of_resource(e.get("status"), e.get("message"))
               for candidate, e in evaluations.items())


def _read_best_evaluation(result: ProblemResult, run_dir: Path) -> None:
    """What result.json leaves out of the run's best: the guard's warnings, the timed trials' spread."""
    from kfoundry.errors import KFoundryError
    from kfoundry.runs import RunStore

    try:
        with RunStore.open(run_dir, resume=False) as store:
            best = store.final_best()
    except KFoundryError:
        return
    if best is None or not best.get("evaluation"):
        return
    judged = CandidateResult(status="ok")
    judged.read_evaluation(best["evaluation"])
    result.policy_warnings = judged.policy_warnings
    result.runtime_stats, result.eager_stats = judged.runtime_stats, judged.eager_stats


def run_floor(run_dir: Path) -> Floor | None:
    """The problem's floor from the run's evaluations, its best's first; None where the store cannot be read."""
    from kfoundry.errors import KFoundryError
    from kfoundry.runs import RunStore

    try:
        with RunStore.open(run_dir, resume=False) as store:
            best = store.final_best() or {}
            floor = floor_of(best.get("evaluation"))
            if floor is None:
                floor = first_floor(e.get("evaluation") for e in store.finished_evaluations().values())
    except KFoundryError:
        return None
    return floor


def apply_run_result(result: ProblemResult, record: dict[str, Any]) -> None:
    """An optimize run's result.json record -> the problem's status and figures."""
    best = record.get("best") or {}
    evaluations, correct = record.get("evaluations") or 0, record.get("correct") or 0
    result.evaluations = evaluations
    for key in FIGURES:
        setattr(result, key, best.get(key))
    # did any candidate of the search compile (a count per status is all result.json keeps)
    result.compiled = bool(best or correct or set(record.get("statuses") or {}) - {"compile_error"})
    result.labels = labels_from_run_result(record)
    # where the speed came from: absent from result files written before these fields
    result.generation0_speedup = (record.get("generation0") or {}).get("speedup_eager")
    result.gain_over_generation0 = record.get("gain_over_generation0")
    # result.json's best needs a speedup: on CPU a correct candidate is correct but has no best
    if best or correct:
        result.status = "ok"
        figures = f"; best {best['speedup_eager']:.3g}x vs eager" if best.get("speedup_eager") else \
            "; not timed"
        result.message = f"{correct} of {evaluations} evaluations correct{figures}"
    else:
        statuses = record.get("statuses") or {}
        spread = ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())) or "none finished"
        result.status = R.NO_CORRECT
        result.message = f"no correct candidate in {evaluations} evaluations ({spread})"


def clear_run_dir(run_dir: Path) -> None:
    """A run dir left by an unfinished attempt that cannot go on is started over."""
    if run_dir.exists():
        shutil.rmtree(run_dir)


def resumable(run_dir: Path, fingerprint: str) -> bool:
    """Whether run_dir holds a search an earlier call of this bench, with the same settings for this problem
    (its fingerprint, kept beside the folder), started and did not finish, in a readable run store."""
    mark = fingerprint_file(run_dir)
    if not mark.is_file() or mark.read_text(encoding="utf-8").strip() != fingerprint:
        return False
    from kfoundry.errors import KFoundryError
    from kfoundry.runs import RunStore

    try:
        with RunStore.open(run_dir, resume=False) as store:
            return bool(store.candidates())
    except KFoundryError:  # no store, a damaged one, another schema: start over
        return False


def fingerprint_file(run_dir: Path) -> Path:
    """Beside the run folder, not in it: a new run needs an empty folder."""
    return run_dir.with_name(run_dir.name + ".fingerprint")
