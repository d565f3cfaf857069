"""The `kfoundry` command: a thin layer over the Python API."""

from __future__ import annotations

import json
import sys
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kfoundry.cli_help import (Backend, Expert, LogLevel, Policy, Precision, Sandbox, Selection, Topology,
                               complete_baselines, complete_gpu, flags_show_no_type, one_line_summaries)
from kfoundry.errors import EnvironmentFault, KFoundryError, UsageError
from kfoundry.sandbox.process_flags import make_non_dumpable

flags_show_no_type()
app = typer.Typer(
    help="Kernel Foundry: turn PyTorch reference programs into fast, verified GPU kernels (forward passes).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True)
EXIT_BAD_INPUT = 2
EXIT_ENVIRONMENT = 2  # an EnvironmentFault: the machine, not the input nor a candidate (kfoundry doctor)


def error_record(exc: KFoundryError) -> dict:
    """--json's one object for an error: an environment fault says its cause and fix apart."""
    if isinstance(exc, EnvironmentFault):
        return exc.to_dict()
    return {"status": "error", "message": str(exc)}


def exit_code(exc: KFoundryError) -> int:
    return EXIT_ENVIRONMENT if isinstance(exc, EnvironmentFault) else EXIT_BAD_INPUT


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        import kfoundry

        def installed(name: str) -> str:
            try:
                return version(name)
            except PackageNotFoundError:
                return "not installed"

        typer.echo(f"kfoundry {kfoundry.__version__} (torch {installed('torch')}, triton {installed('triton')}, "
                   f"Python {sys.version.split()[0]})")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print kfoundry's version and those of torch and triton, and exit."),
) -> None:
    """Kernel Foundry."""


def _fmt(value, unit: str = "", digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}{unit}"
    return f"{value}{unit}"


def _bytes(value) -> str:
    return "-" if value is None else f"{value / 2**20:.1f} MiB"


def _flops(flops: Optional[int]) -> str:
    if flops is None:
        return "FLOPs unknown (the flop counter failed on the reference)"
    if flops == 0:  # a pointwise problem (a GELU chain) does work that the counter does not count
        return "FLOPs not counted (pointwise ops: torch's flop counter counts only matmuls and convolutions)"
    return f"{flops} FLOPs (torch flop counter)"


def render_evaluation(evaluation, console: Console) -> None:
    colour = "green" if evaluation.ok else "red"
    console.print(f"[bold {colour}]{evaluation.status}[/]  {escape(evaluation.message)}", highlight=False)
    for warning in evaluation.warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False)
    for finding in evaluation.guard.get("findings", []):
        where = f"line {finding['line']}: " if finding.get("line") else ""
        text = f"[{finding['rule']}] {where}{finding['message']}"
        console.print(f"[red]guard[/] {escape(text)}", highlight=False)
        if finding.get("advice"):
            console.print(f"      instead: {escape(finding['advice'])}", highlight=False, style="dim")
    c, t = evaluation.correctness, evaluation.timing
    table = Table(title="correctness", show_header=False, title_justify="left")
    table.add_row("trials passed", f"{c.trials_passed} of {len(c.seeds)} (seed {evaluation.settings.get('seed')})")
    table.add_row("precision / tolerance", f"{c.precision}, atol = rtol = {c.tolerance:g}")
    table.add_row("max abs / rel error", f"{_fmt(c.max_abs_error, digits=3)} / {_fmt(c.max_rel_error, digits=3)}")
    table.add_row("fraction of elements off", _fmt(c.mismatch_fraction, digits=3))
    table.add_row("e(candidate) / e(reference)",
                  f"{_fmt(c.error_ratio_candidate, digits=3)} / {_fmt(c.error_ratio_reference, digits=3)} "
                  f"(vs {c.ground_truth} truth, in tolerance units)")
    if evaluation.precision:
        from kfoundry.evaluate.parent.precision_check import describe

        table.add_row("precision checked", describe(evaluation.precision))
    if evaluation.other_sizes is not None:
        table.add_row("other sizes", evaluation.other_sizes.summary().removeprefix("holds at other sizes: "))
    console.print(table)
    timing = Table(title="timing", show_header=True, title_justify="left")
    for column in ("", "median ms", "IQR ms", "min..max ms", "trials", "speedup"):
        timing.add_column(column)
    if t.runtime_ms is None:
        console.print(f"timing: {t.reason or 'not measured'}", highlight=False)
    else:
        rows = [("candidate", t.candidate, None)]
        rows += [(name, stats, t.runtime_ms) for name, stats in t.baselines.items()]
        for name, stats, candidate_ms in rows:
            if stats is None:
                continue
            speed = f"{stats.median_ms / candidate_ms:.3g}x" if candidate_ms else ""
            timing.add_row(name, f"{stats.median_ms:.4g}", f"{stats.q1_ms:.4g}..{stats.q3_ms:.4g}",
                           f"{stats.min_ms:.4g}..{stats.max_ms:.4g}", str(stats.trials), speed)
        console.print(timing)
        for name, problem in t.baseline_errors.items():
            console.print(f"baseline {name} failed: {escape(problem)}", highlight=False)
        console.print(
            f"{t.device} (uuid {t.device_uuid}), torch {t.torch_version}, triton {t.triton_version}; "
            f"statistic: median of trials; {t.method}; baselines {'from cache' if t.baselines_cached else 'measured now'}; "
            f"peak extra memory: candidate {_bytes(t.candidate_peak_memory_bytes)}, "
            f"eager reference {_bytes(t.reference_peak_memory_bytes)}",
            highlight=False, style="dim",
        )
    if evaluation.cost is not None:
        cost = evaluation.cost
        console.print(
            f"problem cost: {_flops(cost.flops)}, minimum bytes {cost.min_bytes} "
            f"(inputs {cost.input_bytes} + outputs {cost.output_bytes}; parameters {cost.parameter_bytes} apart)",
            highlight=False, style="dim",
        )


def render_diagnosis(evaluation, console: Console, max_chars: Optional[int] = None) -> None:
    """Rendered markdown on a terminal; plain text (no `###`, `**`) in a log or a pipe."""
    from kfoundry.diagnose.render import DEFAULT_MAX_CHARS, render_markdown, render_text

    if evaluation.diagnosis is None:
        return
    if console.is_terminal:
        from rich.markdown import Markdown

        console.print(Markdown(render_markdown(evaluation.diagnosis, max_chars or DEFAULT_MAX_CHARS)))
    else:
        console.out(render_text(evaluation.diagnosis, max_chars or DEFAULT_MAX_CHARS), highlight=False)


@contextmanager
def _progress_display(what: str, quiet: bool):
    """A progress callback that shows on stderr (not when `quiet`, as with --json): a spinner on a
    terminal, else a line per phase and a heartbeat (a spinner prints nothing to a file or pipe); every
    message also goes to the run's log."""
    from kfoundry import logs
    from kfoundry.phase_log import PhaseLog, is_terminal

    if quiet:
        yield logs.tee()
    elif not is_terminal(sys.stderr):
        with PhaseLog(sys.stderr, heartbeat_s=logs.heartbeat_s()) as log:
            log.phase(what)
            yield logs.tee(log.phase)
    else:
        with err.status(what) as status:
            yield logs.tee(lambda m: status.update(m))


def _run_evaluation(problem: Path, candidate: Path, options, as_json: bool):
    """Evaluate with progress on stderr (kfoundry.cli._progress_display); bad input exits 2 with a message."""
    from kfoundry import logs
    from kfoundry.evaluate import evaluate

    try:
        with _progress_display("evaluating", as_json) as progress:
            evaluation = evaluate(problem, candidate, options, progress=progress)
        logs.outcome(f"{evaluation.status}: {evaluation.message}", evaluation.to_dict())
        return evaluation
    except KFoundryError as exc:
        logs.outcome(f"error: {exc}")
        if as_json:
            print(json.dumps(error_record(exc)))
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(exit_code(exc))


def _run_config(values: dict, config: Optional[Path] = None):
    """The command's run config and the settings it came from (kfoundry.config.load_run_config: the
    command line over the environment over kfoundry.toml); bad input exits 2 with a message."""
    from kfoundry.config import load_run_config

    try:
        return load_run_config(values, config)
    except KFoundryError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(EXIT_BAD_INPUT)


def _say_settings(settings, sections: tuple[str, ...], names: tuple[str, ...] = ()) -> None:
    """On stderr, the settings of these sections that the environment or kfoundry.toml set: they change
    a verdict without being on the command line."""
    line = settings.line(sections, names)
    if line:
        err.print(escape(line), highlight=False, soft_wrap=True)


@contextmanager
def _run_log(run, settings):
    """The run's log (--log-file, kfoundry.logs), headed by every setting that is not the default."""
    from kfoundry.logs import run_log, setting_lines

    with ExitStack() as stack:
        try:
            stack.enter_context(run_log(run.log, setting_lines(settings.provenance(hidden=False))))
        except KFoundryError as exc:
            err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
            raise typer.Exit(EXIT_BAD_INPUT)
        yield


# options the commands share
SANDBOX_HELP = ("The candidates' OS sandbox (Landlock, seccomp): on (a warning where the kernel lacks a part), "
                "strict (refuse to run without all of it) or off.")
PROBLEM_ARG = typer.Argument(..., metavar="PROBLEM", help="Problem file in KernelBench form (Model, get_inputs, get_init_inputs).")
CANDIDATE_ARG = typer.Argument(..., metavar="CANDIDATE", help="Candidate file defining ModelNew.")
DEVICE_OPT = typer.Option(None, help="cpu, cuda or cuda:N (default: CUDA when available, else CPU).")
PRECISION_OPT = typer.Option(None, help="fp32 (default), fp16 or bf16 (bf16 is refused on CPU).")
TRIALS_OPT = typer.Option(None, help="Correctness trials, each with fresh seeded inputs (default 5).")
TOLERANCE_OPT = typer.Option(None, help="atol = rtol (default 1e-4 for fp32, 1e-2 for fp16/bf16).")
TIMEOUT_OPT = typer.Option(None, help="Seconds allowed for the candidate's whole evaluation (default 300).")
SEED_OPT = typer.Option(None, help="Fix the trial seeds (default: drawn unpredictably, reported).")
EVAL_MODE_OPT = typer.Option(False, "--eval-mode", help="Run both models in .eval() (default: as constructed, training mode).")
CHECK_SIZES_OPT = typer.Option(None, "--check-sizes/--no-check-sizes", help="Judge the final best again at a second size set derived from the problem (another batch, odd spatial sizes, other channel counts): does it hold at other sizes? (default: on)")
TIME_AGAIN_OPT = typer.Option(None, "--time-again/--no-time-again", help="On a GPU, time generation 0's best and the final best again once the search is over, one after the other with nothing else in flight, and report that gain beside the one found (default: on).")
SET_OPT = typer.Option(None, "--set", metavar="<NAME=VALUE>", help="NAME=VALUE: override a module-level constant of the problem (repeatable).")
MEMORY_LIMIT_OPT = typer.Option(None, "--memory-limit", help="GB of host memory the evaluation may plan for (default: what is free: MemAvailable or the cgroup's limit less its usage).")
CONFIG_OPT = typer.Option(None, help="A TOML config file (default: ./kfoundry.toml if present).")
MEMORY_TIER_OPT = typer.Option(None, "--memory-tier", help="Where the judge keeps the expected outputs: auto (default: the first that fits), resident (every set on the device), host (every set's expected outputs in host memory), per-set (one set at a time, computed again).")
WORKERS_OPT = typer.Option(None, "--workers", help="Candidates evaluated at once (default: by CPU cores and free memory; 1 on CPU).")
LOG_FILE_OPT = typer.Option(None, "--log-file", help="Append a full log of the run to this file: the settings and their sources, every progress message and phase line, warnings and the result, timestamped.")
LOG_LEVEL_OPT = typer.Option(None, "--log-level", help="The log file's level: debug (adds the whole result records), info (default), warning or error.")


@app.command("eval")
def eval_command(
    problem: Path = PROBLEM_ARG,
    candidate: Path = CANDIDATE_ARG,
    device: Optional[str] = DEVICE_OPT,
    precision: Optional[Precision] = PRECISION_OPT,
    trials: Optional[int] = TRIALS_OPT,
    tolerance: Optional[float] = TOLERANCE_OPT,
    timeout: Optional[float] = TIMEOUT_OPT,
    seed: Optional[int] = SEED_OPT,
    eval_mode: bool = EVAL_MODE_OPT,
    set_: Optional[list[str]] = SET_OPT,
    timing_trials: Optional[int] = typer.Option(None, help="Timed trials on a GPU (default 100; fewer if one run is very long)."),
    baselines: Optional[str] = typer.Option(None, metavar="<NAME,...>", autocompletion=complete_baselines, help="Baselines to time (default eager,compile): eager, compile, compile-max-autotune, compile-max-autotune-no-cudagraphs, compile-reduce-overhead."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Re-measure the baselines instead of using the cache."),
    policy: Optional[Policy] = typer.Option(None, help="strict (default): all computation in the candidate's own kernels; permissive: PyTorch compute is a warning."),
    wrapper: Optional[str] = typer.Option(None, help="Run the candidate's worker under this command (e.g. 'compute-sanitizer --tool memcheck')."),
    memory_limit: Optional[float] = MEMORY_LIMIT_OPT,
    memory_tier: Optional[str] = MEMORY_TIER_OPT,
    sandbox: Optional[Sandbox] = typer.Option(None, help=SANDBOX_HELP),
    config: Optional[Path] = CONFIG_OPT,
    log_file: Optional[Path] = LOG_FILE_OPT,
    log_level: Optional[LogLevel] = LOG_LEVEL_OPT,
    size_check: bool = typer.Option(False, "--check-sizes", help="Judge a correct candidate again at a second size set derived from the problem (another batch, odd spatial sizes, other channel counts): does it hold at other sizes?"),
    check_set: Optional[list[str]] = typer.Option(None, "--check-set", metavar="<NAME=VALUE>", help="NAME=VALUE: the second size set by hand, like --set (repeatable; implies --check-sizes)."),
    as_json: bool = typer.Option(False, "--json", help="Print exactly one JSON object on stdout."),
) -> None:
    """Evaluate CANDIDATE against PROBLEM: verdict, correctness, timing and the diagnosis.

    Exit code: 0 for verdict ok (and, with --check-sizes, holding at the other sizes), 1 for any other
    verdict, 2 for bad usage, a bad problem file or an environment fault (our imports, CUDA, GPU memory
    held by others: see kfoundry doctor).
    """
    run, settings = _run_config(locals(), config)
    _say_settings(settings, ("eval",))
    second = _parse_set(check_set)
    with _run_log(run, settings):
        evaluation = _run_evaluation(problem, candidate, run.eval, as_json)
        if (size_check or second) and evaluation.ok:
            evaluation.other_sizes = _run_size_check(problem, candidate, run.eval, second, as_json)
    if as_json:
        print(json.dumps(evaluation.to_dict()))
    else:
        console = Console()
        render_evaluation(evaluation, console)
        render_diagnosis(evaluation, console)
    holds = evaluation.other_sizes is None or evaluation.other_sizes.holds is not False
    raise typer.Exit(0 if evaluation.ok and holds else 1)


def _parse_set(items: Optional[list[str]]) -> dict:
    from kfoundry.problem import parse_set_values

    try:
        return parse_set_values(items)
    except KFoundryError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(EXIT_BAD_INPUT)


def _run_size_check(problem: Path, candidate: Path, options, second: dict, as_json: bool):
    """kfoundry.evaluate.parent.size_check with progress on stderr; bad input exits 2 with a message."""
    from kfoundry.evaluate.parent.size_check import check_sizes

    try:
        with _progress_display("checking other sizes", as_json) as progress:
            return check_sizes(problem, candidate, options, second or None, progress=progress)
    except KFoundryError as exc:
        if as_json:
            print(json.dumps(error_record(exc)))
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(exit_code(exc))


@app.command("diagnose")
def diagnose_command(
    problem: Path = PROBLEM_ARG,
    candidate: Path = CANDIDATE_ARG,
    device: Optional[str] = DEVICE_OPT,
    precision: Optional[Precision] = PRECISION_OPT,
    trials: Optional[int] = TRIALS_OPT,
    tolerance: Optional[float] = TOLERANCE_OPT,
    timeout: Optional[float] = TIMEOUT_OPT,
    seed: Optional[int] = SEED_OPT,
    eval_mode: bool = EVAL_MODE_OPT,
    set_: Optional[list[str]] = SET_OPT,
    policy: Optional[Policy] = typer.Option(None, help="strict (default) or permissive (see kfoundry eval --help)."),
    ncu: bool = typer.Option(False, "--ncu", help="GPU: also profile a working candidate with Nsight Compute (occupancy, DRAM/SM throughput, tensor pipes)."),
    sanitize: bool = typer.Option(False, "--sanitize", help="GPU: re-run a crashing or wrong candidate under compute-sanitizer memcheck."),
    max_chars: int = typer.Option(2500, help="Length bound of the markdown rendering."),
    sandbox: Optional[Sandbox] = typer.Option(None, help=SANDBOX_HELP),
    config: Optional[Path] = CONFIG_OPT,
    log_file: Optional[Path] = LOG_FILE_OPT,
    log_level: Optional[LogLevel] = LOG_LEVEL_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print the diagnosis as one JSON object on stdout."),
) -> None:
    """Evaluate CANDIDATE against PROBLEM and print only its diagnosis: structured findings (what
    failed and where, the error's pattern, the roofline and the bottleneck) and a next step.

    Exit code: 0 for verdict ok, 1 for any other verdict, 2 for bad usage, a bad problem file or an
    environment fault.
    """
    run, settings = _run_config(locals(), config)
    _say_settings(settings, ("eval",))
    with _run_log(run, settings):
        evaluation = _run_evaluation(problem, candidate, run.eval, as_json)
    if as_json:
        print(json.dumps(evaluation.diagnosis.to_dict()))
    else:
        render_diagnosis(evaluation, Console(), max_chars)
    raise typer.Exit(0 if evaluation.ok else 1)


@app.command("generate")
def generate_command(
    problem: Path = typer.Argument(..., help="Problem file in KernelBench form."),
    llm: Optional[list[str]] = typer.Option(None, "--llm", metavar="<SPEC>", help="Provider spec (repeatable: an ensemble): openai:MODEL, openai:MODEL@BASE_URL, anthropic:MODEL, cmd:COMMAND, replay:FILE.jsonl."),
    llm_weights: Optional[str] = typer.Option(None, help="Weights of the --llm providers, e.g. 2,1."),
    expert: Optional[Expert] = typer.Option(None, help="initializer, repair, memory, compute, fusion, algorithm or crossover (default: the router chooses from the parent's diagnosis)."),
    parent: Optional[list[Path]] = typer.Option(None, "--parent", metavar="<FILE>", help="A candidate to start from (repeat for crossover)."),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="Where to write the candidate (default: PROBLEM_EXPERT.py here)."),
    backend: Optional[Backend] = typer.Option(None, help="What the expert writes: triton (default) or cuda."),
    target_gpu: Optional[str] = typer.Option(None, autocompletion=complete_gpu, help="On a CPU run, the GPU whose datasheet figures the prompts show: H100, H100 PCIe, H200, A100, L40S or RTX 4090 (default: a typical H100); a GPU run shows its own and ignores this."),
    attempts: int = typer.Option(1, help="LLM calls allowed when a reply is unusable (its reason goes into the next prompt)."),
    record: Optional[Path] = typer.Option(None, help="Append every LLM exchange to this JSONL file (replay:FILE reads it)."),
    reject_similar: Optional[float] = typer.Option(None, help="Drop proposals whose code embedding is this similar (cosine, e.g. 0.95) to a candidate already seen; needs kfoundry\\[embeddings]."),
    config: Optional[Path] = CONFIG_OPT,
    log_file: Optional[Path] = LOG_FILE_OPT,
    log_level: Optional[LogLevel] = LOG_LEVEL_OPT,
    device: Optional[str] = DEVICE_OPT,
    precision: Optional[Precision] = typer.Option(None, help="fp32 (default), fp16 or bf16."),
    tolerance: Optional[float] = typer.Option(None, help="atol = rtol (default: by precision)."),
    trials: Optional[int] = typer.Option(None, help="Correctness trials (default 5)."),
    timeout: Optional[float] = typer.Option(None, help="Seconds per candidate evaluation (default 300)."),
    llm_timeout: Optional[float] = typer.Option(None, help="Seconds per LLM call (default 600)."),
    budget_dollars: Optional[float] = typer.Option(None, help="Refuse to spend more than this on LLM calls (USD)."),
    budget_tokens: Optional[int] = typer.Option(None, help="Refuse to use more than this many tokens."),
    policy: Optional[Policy] = typer.Option(None, help="strict (default) or permissive."),
    seed: Optional[int] = typer.Option(None, help="Fix the trial seeds."),
    set_: Optional[list[str]] = SET_OPT,
    show_prompt: bool = typer.Option(False, "--show-prompt", help="Also print the prompt that was sent."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object on stdout."),
) -> None:
    """One expert step: ask the LLM for a candidate, write it, evaluate it, print the verdict and
    the diagnosis.

    Exit code: 0 when the candidate is ok, 1 when it is not (or no usable reply came), 2 for bad usage or an
    environment fault.
    """
    from kfoundry.generate import generate, make_llm

    from kfoundry import logs

    run, settings = _run_config(locals(), config)
    _say_settings(settings, ("eval", "llm"), ("llm", "backend", "target_gpu"))
    options, backend = run.eval, run.search.backend
    try:
        llm_client, budget = make_llm(run.search.llm, run.llm, settings.api_keys)
    except KFoundryError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(EXIT_BAD_INPUT)
    try:
        with _run_log(run, settings), _progress_display("generating", as_json) as progress:
            result = generate(problem, llm_client, expert=expert, parents=parent or [], options=options,
                              backend=backend, out=out, attempts=attempts, budget=budget, progress=progress,
                              target_gpu=run.search.target_gpu)
            logs.outcome(f"expert {result.expert}: " + (result.evaluation.status if result.evaluation else
                                                         "no usable reply"), result.to_dict())
    except KFoundryError as exc:
        if as_json:
            print(json.dumps(error_record(exc)))
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(exit_code(exc))
    if as_json:
        print(json.dumps(result.to_dict()))
        raise typer.Exit(0 if result.ok else 1)
    from kfoundry.llm.cost_text import cost_text

    console = Console()
    console.print(f"expert: [bold]{result.expert}[/] ({escape(result.reason)})", highlight=False)
    for parent_record in result.parents:
        console.print(f"parent {escape(parent_record['path'])}: {parent_record['status']}", highlight=False)
    for number, attempt in enumerate(result.attempts, start=1):
        reply = attempt.reply or {}
        usage = (f"{reply.get('input_tokens')} in / {reply.get('output_tokens')} out tokens, cost "
                 f"{cost_text(reply.get('cost_usd'), int(reply.get('cost_usd') is None))}, "
                 f"{reply.get('latency_s', 0):.1f} s, {reply.get('attempts')} call(s)") if reply else "no reply"
        state = f"unusable: {attempt.failure}" if attempt.failure else f"candidate ({attempt.reply_kind})"
        console.print(f"attempt {number}: {escape(reply.get('provider', '-'))}: {escape(usage)}; {escape(state)}",
                      highlight=False)
    if show_prompt and result.prompt:
        console.print(escape(f"--- system prompt ---\n{result.prompt['system']}\n--- user prompt ---\n"
                             f"{result.prompt['user']}\n--- end of prompt ---"), highlight=False)
    if result.evaluation is None:
        console.print("[bold red]no candidate[/]: no usable reply", highlight=False)
        raise typer.Exit(1)
    console.print(f"candidate written to {escape(result.candidate_path)}", highlight=False)
    render_evaluation(result.evaluation, console)
    render_diagnosis(result.evaluation, console)
    raise typer.Exit(0 if result.ok else 1)


@app.command("optimize")
def optimize_command(
    problem: Optional[Path] = typer.Argument(None, metavar="PROBLEM", help="Problem file in KernelBench form (not needed with --resume)."),
    llm: Optional[list[str]] = typer.Option(None, "--llm", metavar="<SPEC>", help="Provider spec (repeatable): openai:MODEL, openai:MODEL@BASE_URL, anthropic:MODEL, cmd:COMMAND, replay:FILE.jsonl; none: no LLM (the default: composer + tuner)."),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="Run directory (default: runs/PROBLEM-TIMESTAMP)."),
    resume: Optional[Path] = typer.Option(None, help="Continue a stopped run from its directory."),
    seed_kernels: Optional[list[Path]] = typer.Option(None, "--seed-kernel", metavar="<FILE>", help="A kernel of yours (a ModelNew file) for the first population (repeatable)."),
    seed_given: Optional[list[str]] = typer.Option(None, "--seed", metavar="<N>", help="The random seed: fixes both the search's (parents, experts, the tuner) and the trial seeds of every evaluation (default: search 0, trial seeds drawn unpredictably and reported). For this release a FILE that exists is read as --seed-kernel FILE, with a warning."),
    max_evals: Optional[int] = typer.Option(None, help="Stop after this many evaluations (default 32 when no budget is given)."),
    max_cost: Optional[float] = typer.Option(None, help="Stop once LLM calls cost this many dollars."),
    max_time: Optional[float] = typer.Option(None, help="Stop after this many seconds."),
    target_speedup: Optional[float] = typer.Option(None, help="Stop once a verified candidate is this many times faster than eager."),
    target_roofline: Optional[float] = typer.Option(None, help="Stop once a verified candidate reaches this fraction of the roofline (0-1)."),
    stagnation: Optional[int] = typer.Option(None, help="Stop after this many generations without a better candidate (default 8)."),
    max_generations: Optional[int] = typer.Option(None, help="Stop after this many generations."),
    islands: Optional[int] = typer.Option(None, help="Islands, each with its own population (default 4)."),
    migrate_every: Optional[int] = typer.Option(None, help="Generations between migrations (default 3)."),
    concurrency: Optional[int] = typer.Option(None, help="Expert proposals (LLM calls) at once (default 4)."),
    topology: Optional[Topology] = typer.Option(None, help="Where migrants go: ring (default) or all-to-all."),
    devices: Optional[str] = typer.Option(None, help="Evaluation workers, one per device: cuda:0,cuda:1 or all (cpu:N on CPU)."),
    cluster: Optional[str] = typer.Option(None, help="ray (a local Ray instance) or ray://HOST:PORT: evaluation workers are Ray actors, one per GPU."),
    selection: Optional[Selection] = typer.Option(None, help="Parent selection: tournament (default) or proportional."),
    record: Optional[Path] = typer.Option(None, help="Append every LLM exchange to this JSONL file (replay:FILE reads it)."),
    reject_similar: Optional[float] = typer.Option(None, help="Drop proposals whose code embedding is this similar (cosine, e.g. 0.95) to a candidate already seen; needs kfoundry\\[embeddings]."),
    library: Optional[Path] = typer.Option(None, help="Experience library file (default: in the user's cache directory)."),
    no_library: bool = typer.Option(False, "--no-library", help="Neither read nor write the experience library."),
    rng_seed: Optional[int] = typer.Option(None, hidden=True, help="Deprecated: --seed N. The search's random seed alone."),
    backend: Optional[Backend] = typer.Option(None, help="What the LLM experts write: triton (default) or cuda."),
    target_gpu: Optional[str] = typer.Option(None, autocompletion=complete_gpu, help="On a CPU run, the GPU whose datasheet figures the prompts show: H100, H100 PCIe, H200, A100, L40S or RTX 4090 (default: a typical H100); a GPU run shows its own and ignores this."),
    check_sizes: Optional[bool] = CHECK_SIZES_OPT,
    time_again: Optional[bool] = TIME_AGAIN_OPT,
    config: Optional[Path] = CONFIG_OPT,
    log_file: Optional[Path] = LOG_FILE_OPT,
    log_level: Optional[LogLevel] = LOG_LEVEL_OPT,
    device: Optional[str] = DEVICE_OPT,
    precision: Optional[Precision] = typer.Option(None, help="fp32 (default), fp16 or bf16."),
    tolerance: Optional[float] = typer.Option(None, help="atol = rtol (default: by precision)."),
    trials: Optional[int] = typer.Option(None, help="Correctness trials per candidate (default 5)."),
    timeout: Optional[float] = typer.Option(None, help="Seconds per candidate evaluation (default 300)."),
    eval_mode: bool = EVAL_MODE_OPT,
    policy: Optional[Policy] = typer.Option(None, help="strict (default) or permissive."),
    set_: Optional[list[str]] = SET_OPT,
    memory_limit: Optional[float] = MEMORY_LIMIT_OPT,
    memory_tier: Optional[str] = MEMORY_TIER_OPT,
    workers: Optional[int] = WORKERS_OPT,
    sandbox: Optional[Sandbox] = typer.Option(None, help=SANDBOX_HELP),
    quiet: bool = typer.Option(False, "--quiet", help="No progress display."),
    as_json: bool = typer.Option(False, "--json", help="Print the result record as one JSON object on stdout."),
) -> None:
    """Search for a faster verified ModelNew: a first population (your --seed-kernel files, earlier best
    kernels from the library, the composer's kernels), then multi-island evolution with the tuner and,
    with --llm, the LLM experts. Writes RUN_DIR/best.py, result.json, history.json, report.html.

    Exit code: 0 when a verified candidate was found, 1 when none was, 2 for bad usage or an environment
    fault (the run stops at once; what it evaluated is kept for --resume).
    """
    from kfoundry import logs
    from kfoundry.config import load_run_config
    from kfoundry.generate import make_llm
    from kfoundry.optimize import optimize

    if no_library:
        library = Path("off")
    try:
        seed, seed_kernels = _seed_or_kernels(seed_given or [], seed_kernels or [])
        run, settings = load_run_config(locals(), config)
        _warn_rng_seed(settings)
        specs = [spec for spec in run.search.llm if spec.strip().lower() != "none"]  # --llm none: no LLM
        if specs and len(specs) != len(run.search.llm):
            raise UsageError("--llm none means no LLM: it cannot go with other --llm specs")
        phases = logs.progress if quiet or as_json else None  # into the log, where no panel takes them
        with _run_log(run, settings):
            if resume is not None:  # the run's own config; what the command line gives of the budget may grow it
                budget_given = {"max_evals": max_evals, "max_cost": max_cost, "max_time_s": max_time,
                                "target_speedup": target_speedup, "target_roofline": target_roofline,
                                "stagnation": stagnation, "max_generations": max_generations}
                logs.progress(f"resuming {resume}: with the settings it stored (a budget given here may grow it)")
                result = optimize(resume=resume, quiet=quiet or as_json, progress=phases, **budget_given)
            else:
                run.search.llm, run.seeds = specs, [str(p) for p in seed_kernels]
                llm_client = budget = None
                if specs:
                    llm_client, budget = make_llm(specs, run.llm, settings.api_keys)
                if not quiet:
                    _say_settings(settings, ("search", "eval", "llm"))
                result = optimize(problem, out=out, config=run, quiet=quiet or as_json, llm_client=llm_client,
                                  budget=budget, progress=phases)
            logs.outcome(f"{result['stop_reason']}; {result['evaluations']} evaluation(s), "
                         f"{result['correct']} correct; run folder {result['run_dir']}", result)
    except KFoundryError as exc:
        if as_json:
            print(json.dumps(error_record(exc)))
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        run_dir = getattr(exc, "run_dir", None)
        if run_dir:
            err.print(f"no candidate was charged with it; once it is fixed, continue with "
                      f"kfoundry optimize --resume {escape(run_dir)}", highlight=False)
        raise typer.Exit(exit_code(exc))
    except KeyboardInterrupt as exc:
        run_dir = getattr(exc, "run_dir", None)
        if run_dir:
            err.print(f"interrupted: every finished evaluation is kept; continue with "
                      f"kfoundry optimize --resume {escape(run_dir)}", highlight=False)
            raise typer.Exit(130)
        raise
    found = result.get("best") is not None
    if as_json:
        print(json.dumps(result))
        raise typer.Exit(0 if found else 1)
    _print_optimize_result(result)
    raise typer.Exit(0 if found else 1)


def _seed_or_kernels(given: list[str], kernels: list[Path]) -> tuple[Optional[int], list[Path]]:
    """optimize's --seed values: the random seed, or (for this release, with a warning) a kernel file
    that exists, as --seed was before --seed-kernel."""
    seeds = set()
    kernels = list(kernels)
    for value in given:
        if Path(value).is_file():
            err.print(f"[yellow]warning:[/] --seed {escape(value)}: a kernel file is --seed-kernel FILE now "
                      "(--seed N is the random seed); read as --seed-kernel this time", highlight=False)
            kernels.append(Path(value))
            continue
        try:
            seeds.add(int(value))
        except ValueError:
            raise UsageError(f"--seed {value!r}: the random seed is an integer; a kernel of yours is "
                             "--seed-kernel FILE (and no file of that name exists)") from None
    if len(seeds) > 1:
        raise UsageError(f"--seed given {len(seeds)} different values ({', '.join(map(str, sorted(seeds)))}): "
                         "give one")
    return (seeds.pop() if seeds else None), kernels


def _warn_rng_seed(settings) -> None:
    """rng_seed still sets the search's random seed alone (kfoundry.config.build_run_config), for a release."""
    if settings.sources["rng_seed"] != "default":
        err.print("[yellow]warning:[/] --rng-seed (rng_seed, KFOUNDRY_RNG_SEED) is deprecated: --seed N fixes "
                  "the search's random seed and the trial seeds", highlight=False)


def _print_optimize_result(result: dict) -> None:
    from kfoundry.llm.cost_text import cost_text

    console = Console()
    run_dir = result["run_dir"]
    console.print(f"stopped: {escape(result['stop_reason'])}", highlight=False)
    console.print(f"{result['evaluations']} evaluation(s) in {result.get('generations')} generation(s); "
                  f"{result['correct']} correct ({result['correctness_rate'] or 0:.0%}); "
                  f"LLM cost {cost_text(result['llm']['cost_usd'], result['llm'].get('unknown_cost_calls') or 0)}",
                  highlight=False)
    best = result.get("best")
    if best is None:
        console.print("[bold red]no verified candidate[/]: see the diagnoses in "
                      f"{escape(run_dir)}/report.html", highlight=False)
        return
    timing = best.get("timing") or {}
    if best.get("speedup_eager") is not None:
        console.print(f"best: candidate {best['candidate_id']} ({escape(best['expert'])}): "
                      f"{_fmt(best['runtime_ms'], ' ms')} vs eager {_fmt(best['eager_ms'], ' ms')} "
                      f"({best['speedup_eager']:.3g}x), vs torch.compile "
                      f"{_fmt(best['speedup_compile'], 'x', 3)}; {timing.get('statistic')} of "
                      f"{timing.get('trials')} trials on {escape(str(timing.get('device')))}", highlight=False)
    else:
        console.print(f"best: candidate {best['candidate_id']} ({escape(best['expert'])}): correct on CPU "
                      "(not timed: the interpreter is not a performance measurement)", highlight=False)
    console.print(f"written: {escape(run_dir)}/best.py, result.json, history.json, report.html", highlight=False)


def _mount_library() -> None:
    from kfoundry.library.cli import library_app

    app.add_typer(library_app, name="library", help="The experience library: list, show, search, stats, export, import, prune.")
    from kfoundry.bench.cli import register as register_bench
    from kfoundry.runs.report_cli import register as register_report

    from kfoundry.doctor.cli import register as register_doctor

    register_bench(app)
    register_report(app)
    register_doctor(app)


_mount_library()
one_line_summaries(app)

config_app = typer.Typer(help="The settings in force: command line > environment > kfoundry.toml > defaults.",
                         no_args_is_help=True)
app.add_typer(config_app, name="config")


@config_app.command("show")
def config_show(
    config: Optional[Path] = CONFIG_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object on stdout."),
) -> None:
    """Print every setting, its value and where it came from (API keys masked)."""
    from kfoundry.config import load_settings

    try:
        settings = load_settings({}, config)
    except KFoundryError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(EXIT_BAD_INPUT)
    rows = settings.rows()
    if as_json:
        print(json.dumps({name: {"value": value, "source": source} for name, value, source in rows}))
        return
    table = Table(title=f"settings (config file: {settings.config_path or 'none'})", title_justify="left")
    for column in ("setting", "value", "from"):
        table.add_column(column)
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    Console().print(table)


def main() -> None:
    # this process holds the API keys: other processes of the user (a candidate's, say) cannot read its
    # memory or /proc/<pid>/environ, nor attach to it (root still can: the sandbox's filesystem rules stop that)
    make_non_dumpable()
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
