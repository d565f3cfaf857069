"""`kfoundry bench SUITE`: score a method on a suite of problems. Mounted on the main app by
`register(app)`."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from kfoundry.cli_help import BenchMethod, LogLevel, Policy, Precision, complete_baselines
from kfoundry.errors import EnvironmentFault, KFoundryError

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130

SUITE_ARG = typer.Argument(..., metavar="SUITE", help="Directory of problems in KernelBench form (also KernelBench's own repository "
                           "with --level, or examples/ with one folder per problem).")
SOLUTIONS_ARG = typer.Argument(None, metavar="DIR",
                               help="With --method solutions: the directory of candidate files, named like the "
                               "problems or KernelBench's level_L_problem_N_sample_K_kernel.py (every sample K is "
                               "judged).")
METHOD_OPT = typer.Option(None, help="optimize (the default: a search per problem), solutions DIR (judge ready-made "
                          "candidates), or reference (the reference against itself: a check of the harness).")
LEVEL_OPT = typer.Option(None, help="KernelBench level: take the problems of SUITE/levelN/.")
PROBLEMS_OPT = typer.Option(None, help="Pick problems by the leading number of the file name, e.g. 1-20,35.")
OUT_OPT = typer.Option(None, "-o", "--out", help="Output directory (default: bench-SUITE-METHOD here): bench.json, "
                       "bench.csv, bench.html, runs/.")
RESUME_OPT = typer.Option(False, "--resume", help="Continue the bench in --out: problems finished with the same "
                          "method and settings are kept.")
TIME_PER_PROBLEM_OPT = typer.Option(None, help="Seconds per problem: the search's time budget (optimize), the "
                                    "evaluation's timeout (other methods).")
DEVICE_OPT = typer.Option(None, help="cpu, cuda or cuda:N (default: CUDA when available, else CPU).")
PRECISION_OPT = typer.Option(None, help="fp32 (default), fp16 or bf16.")
TRIALS_OPT = typer.Option(None, help="Correctness trials per evaluation (default 5).")
TOLERANCE_OPT = typer.Option(None, help="atol = rtol (default 1e-4 for fp32, 1e-2 for fp16/bf16).")
TIMEOUT_OPT = typer.Option(None, help="Seconds allowed for one candidate's evaluation (default 300).")
SEED_OPT = typer.Option(None, help="The random seed: fixes the trial seeds and, with --method optimize, each "
                        "search's random seed (default: trial seeds drawn unpredictably, search seed 0).")
EVAL_MODE_OPT = typer.Option(False, "--eval-mode", help="Run the models in .eval().")
SET_OPT = typer.Option(None, "--set", metavar="<NAME=VALUE>", help="NAME=VALUE: override a module-level constant in every problem that has "
                       "it (repeatable).")
TIMING_TRIALS_OPT = typer.Option(None, help="Timed trials on a GPU (default 100).")
BASELINES_OPT = typer.Option(None, metavar="<NAME,...>", autocompletion=complete_baselines,
                              help="Baselines to time (default eager,compile): eager, compile, compile-max-autotune, "
                              "compile-max-autotune-no-cudagraphs, compile-reduce-overhead.")
NO_CACHE_OPT = typer.Option(False, "--no-cache", help="Re-measure the baselines.")
POLICY_OPT = typer.Option(None, help="Guard policy for candidates: strict (default) or permissive (PyTorch compute "
                          "only warns; with --tolerance 1e-2, as published KernelBench numbers).")
LLM_OPT = typer.Option(None, "--llm", metavar="<SPEC>", help="optimize: provider spec (repeatable).")
MAX_EVALS_OPT = typer.Option(None, help="optimize: evaluations per problem.")
MAX_COST_OPT = typer.Option(None, help="optimize: USD per problem.")
TARGET_SPEEDUP_OPT = typer.Option(None, help="optimize: stop a problem at this speedup vs eager.")


def bench_command(
    suite: Path = SUITE_ARG,
    solutions: Path | None = SOLUTIONS_ARG,
    method: BenchMethod | None = METHOD_OPT,
    level: int | None = LEVEL_OPT,
    problems: str | None = PROBLEMS_OPT,
    out: Path | None = OUT_OPT,
    resume: bool = RESUME_OPT,
    time_per_problem: float | None = TIME_PER_PROBLEM_OPT,
    device: str | None = DEVICE_OPT,
    precision: Precision | None = PRECISION_OPT,
    trials: int | None = TRIALS_OPT,
    tolerance: float | None = TOLERANCE_OPT,
    timeout: float | None = TIMEOUT_OPT,
    seed: int | None = SEED_OPT,
    eval_mode: bool = EVAL_MODE_OPT,
    set_: list[str] | None = SET_OPT,
    timing_trials: int | None = TIMING_TRIALS_OPT,
    baselines: str | None = BASELINES_OPT,
    no_cache: bool = NO_CACHE_OPT,
    policy: Policy | None = POLICY_OPT,
    llm: list[str] | None = LLM_OPT,
    max_evals: int | None = MAX_EVALS_OPT,
    max_cost: float | None = MAX_COST_OPT,
    target_speedup: float | None = TARGET_SPEEDUP_OPT,
    check_sizes: bool | None = typer.Option(None, "--check-sizes/--no-check-sizes", help="Judge each problem's "
                                            "reported candidate again at a second size set of the problem (does "
                                            "it hold at other sizes?); default on."),
    bench_devices: str | None = typer.Option(None, "--devices", help="Run several problems at once, one per device: "
                                             "cuda:0,cuda:1 or all (cpu:N on CPU)."),
    memory_limit: float | None = typer.Option(None, "--memory-limit", help="GB of host memory each problem's "
                                              "evaluation may plan for (default: what is free)."),
    memory_tier: str | None = typer.Option(None, "--memory-tier", help="Where the judge keeps the expected outputs: "
                                           "auto (default), resident, host or per-set."),
    workers: int | None = typer.Option(None, "--workers", help="Candidates evaluated at once per device."),
    config: Path | None = typer.Option(None, help="A TOML config file (default: ./kfoundry.toml if present)."),
    log_file: Path | None = typer.Option(None, "--log-file", help="Append a full log of the bench to this file: the "
                                         "settings and their sources, every problem's lines and steps, warnings "
                                         "and the result, timestamped."),
    log_level: LogLevel | None = typer.Option(None, "--log-level", help="The log file's level: debug (adds the whole "
                                         "bench record), info (default), warning or error."),
) -> None:
    """Score a method on a suite: correctness and compile rates, fast_p (p = 0, 0.5, 0.8, 1, 1.2, 1.5, 2),
    geometric-mean speedups vs eager and vs torch.compile, and pass@k over KernelBench's samples. Writes
    bench.json (after every problem), bench.csv, bench.html, KernelBench's eval_results.json and
    baseline_time_torch.json, and a run directory per problem (runs/NAME/, with its report.html).

    To compare with published numbers, use --policy permissive --tolerance 1e-2.

    Usage: kfoundry bench SUITE --method reference | --method solutions DIR | --method optimize [--llm SPEC].

    Exit code: 0 when the bench ran, whatever the problems' verdicts; 2 for bad usage, a bad suite or an
    environment fault (our imports, CUDA, GPU memory held by others: see kfoundry doctor), which stops the
    bench at the problem it met, recorded as environment_error.

    Interrupted (exit code 130), it keeps what finished: run it again with --resume.
    """
    values = dict(locals())  # the parameters: those named like a setting are the command line's
    from kfoundry import logs
    from kfoundry.bench.progress import BenchProgress, evaluations_per_problem
    from kfoundry.bench.runner import run_bench
    from kfoundry.bench.config import validate
    from kfoundry.bench.suite import discover
    from kfoundry.bench.table import print_report
    from kfoundry.config import load_run_config

    err = Console(stderr=True)
    console = Console()
    try:
        run, settings = load_run_config(values, config)
        run.bench.solutions = solutions
        validate(run)  # before the suite is read: bad usage is said first
        method = run.bench.method
        line = settings.line(("eval", "bench") + (("search", "llm") if method == "optimize" else ()))
        if line:  # the environment or kfoundry.toml change the verdicts unseen: say how
            err.print(escape(line), highlight=False, soft_wrap=True)
        with logs.run_log(run.log, logs.setting_lines(settings.provenance(hidden=False))):
            found = discover(suite, level=level, problems=problems)
            for path, reason in found.skipped:
                logs.progress(f"skipped {path}: {reason}")
                err.print(f"[yellow]skipped[/] {escape(path)}: {escape(reason)}", highlight=False)
            target = out or Path(f"bench-{suite.resolve().name}-{method}")
            with BenchProgress(err, len(found.problems), evaluations_per_problem(run)) as display:
                report = run_bench(found, run, target, resume=resume, progress=display, finished=display.finished)
            logs.outcome(f"{len(report.results)} problem(s) finished, {len(report.pending)} pending; "
                         f"written to {target}", report.to_dict())
    except KFoundryError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        if isinstance(exc, EnvironmentFault):
            err.print("the bench stopped: no problem is judged by a machine that fails; once it is fixed, run the "
                      "same command with --resume", highlight=False)
        raise typer.Exit(EXIT_BAD_INPUT)
    print_report(report, console)
    console.print(f"written: {escape(str(target))}/bench.json, bench.csv, bench.html, eval_results.json, "
                  "baseline_time_torch.json, runs/", highlight=False, soft_wrap=True)
    if report.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)


def register(app: typer.Typer) -> None:
    """Add the `bench` command to `app`."""
    app.command("bench")(bench_command)
