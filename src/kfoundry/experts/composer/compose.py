"""The composer's entry point: problem file in, complete Triton candidates out (several tile configurations),
or the list of ops it cannot handle and no candidate at all (never a PyTorch fallback)."""

from __future__ import annotations

import copy
import itertools
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch

from kfoundry.dynamo_stand_in import no_dynamo_import
from kfoundry.errors import ProblemError
from kfoundry.problem import on_host
from kfoundry.experts.composer.emit.codegen import generate
from kfoundry.experts.composer.emit.graphed import GRAPH_MIN_LAUNCH_SITES, can_graph
from kfoundry.experts.composer.genome import REDUCTION_APART, TAIL_IN_ROW, Genome, GenomeSpace
from kfoundry.experts.composer.ir.graph import INPUT, PARAM, Graph, Op, Value, category
from kfoundry.experts.composer.plan.fusion import plan, plan_with_tails_in_rows
from kfoundry.experts.composer.plan.steps import Group, Plan, describe_groups
from kfoundry.experts.composer.plan.amplification import normalised
from kfoundry.experts.composer.plan.conv_statistics import with_conv_statistics
from kfoundry.experts.composer.plan.recurrence import with_recurrences
from kfoundry.experts.composer.plan.rolling import LoopEnd, LoopStart, plan_rolled
from kfoundry.experts.composer.plan.window_store import with_pooling_before_store
from kfoundry.experts.composer.read.lower_aten import read_aten_graph
from kfoundry.experts.composer.read.lower_fx import ReadFailed, read_graph
from kfoundry.experts.composer.read.model_init import InitError, InitParts, init_parts
from kfoundry.experts.composer.read.numbers import module_numbers
from kfoundry.experts.composer.read.trace import (
    Sample,
    TraceFailed,
    load_sample,
    trace_dispatch,
    trace_fx,
)
from kfoundry.experts.composer.templates import conv, gemm, moments, pointwise, pool, recurrent, reduction, scan
from kfoundry.experts.composer.templates.device_limits import DeviceFacts, DeviceLimits
from kfoundry.types import ReferenceRounding

KIND_ORDER = ("recurrent", "gemm", "conv", "pool", "scan", "row", "moments", "pointwise")
UNTRACEABLE = "untraceable forward"  # neither torch.fx nor the dispatch-level trace could read it


@dataclass
class ComposedCandidate:
    name: str  # e.g. "gemm_epilogue_bm64_bn64_bk32_w4"
    source: str  # a complete candidate file (imports, kernels, class ModelNew)
    config: dict  # the tile configuration of each kernel, by kernel name
    genome: Genome | None = None  # every decision behind it: the space rebuilds the same source from it


@dataclass
class ComposeResult:
    candidates: list[ComposedCandidate]
    unsupported: list[str]  # ops the composer cannot handle (then candidates == [])
    message: str  # one sentence: what it composed, or why nothing
    notes: list[str] = field(default_factory=list)  # how the problem was read (tracer, fallbacks)
    space: GenomeSpace | None = None  # every candidate the composer can write for the problem (genome.py)


@dataclass
class Captured:
    graph: Graph | None
    unsupported: dict[str, str]
    tracer: str
    notes: list[str]


def capture(sample: Sample) -> Captured:
    """The problem's computation as IR: torch.fx first, the dispatch-level trace where FX fails."""
    notes: list[str] = []
    fx_unsupported: dict[str, str] = {}
    try:
        return Captured(_read_fx(sample), {}, "fx", notes)
    except TraceFailed as exc:
        notes.append(str(exc))
    except ReadFailed as exc:
        fx_unsupported = exc.unsupported
        notes.append("torch.fx trace holds unsupported ops: " + ", ".join(exc.unsupported))
    try:
        graph = read_aten_graph(trace_dispatch(sample.model, sample.inputs), sample.eval_mode)
        notes.append("read from the dispatch-level (ATen) trace")
        return Captured(graph, {}, "aten", notes)
    except TraceFailed as exc:
        notes.append(str(exc))
        return Captured(None, fx_unsupported or {UNTRACEABLE: str(exc)}, "none", notes)
    except ReadFailed as exc:
        notes.append("dispatch-level trace holds unsupported ops: " + ", ".join(exc.unsupported))
        return Captured(None, fx_unsupported or exc.unsupported, "none", notes)


def _read_fx(sample: Sample) -> Graph:
    """The torch.fx reading, the module's numbers read when forward runs; where that reading fails, the one that
    takes them at their traced values (which the candidate checks)."""
    try:
        return read_graph(trace_fx(sample.model, sample.inputs), sample.eval_mode)
    except ReadFailed:
        if not module_numbers(sample.model):
            raise
    return read_graph(trace_fx(sample.model, sample.inputs, numbers=False), sample.eval_mode)


def check_graph(graph: Graph) -> dict[str, str]:
    """Ops the templates cannot run although the reader took them."""
    problems: dict[str, str] = {}
    for op in graph.ops:
        kind = category(op.name)
        tensors = op.tensor_args
        if kind in ("gemm", "conv") and not all(t.is_float for t in tensors):
            problems.setdefault(f"{op.name} of integer tensors", op.origin)
        made = tensors + [op.out] if op.out.is_tensor else tensors  # a host number may be a Python float
        if any(t.dtype is not None and (t.dtype.is_complex or t.dtype == torch.float64) for t in made):
            problems.setdefault(f"{op.name} on {next(t.dtype for t in made if t.dtype is not None)}", op.origin)
        if kind == "pool" and op.name.startswith("adaptive") and any(s == 0 for s in op.out.shape):
            problems.setdefault(op.name, "empty output")
        if op.out.is_tensor and any(s == 0 for s in op.out.shape):
            problems.setdefault("empty tensors", op.origin)
    for value in graph.outputs:
        if value.dtype is not None and value.dtype.is_complex:
            problems.setdefault("complex outputs", "")
    return problems


def copy_unwritten_outputs(graph: Graph) -> Graph:
    """Outputs that no kernel would write (an input, a parameter, a view of one) get a copy kernel: a
    candidate returns fresh tensors its kernels wrote."""
    for i, value in enumerate(graph.outputs):
        root = value
        while root.producer is not None and category(root.producer.name) == "view":
            root = root.producer.args[0]
        if root.kind in (INPUT, PARAM):
            out = Value(f"{value.name}_copy", "tensor", value.shape, value.dtype, value.fixed_dtype)
            op = Op("identity", [value], {}, out, "copy")
            out.producer = op
            graph.ops.append(op)
            graph.outputs[i] = out
    return graph


def group_configs(group: Group, precision: str, tolerance: float | None,
                  device: DeviceFacts | DeviceLimits | None = None, normalised: bool = False,
                  reference: ReferenceRounding | None = None) -> list[dict]:
    """The group's tile configurations, each fitting `device` (device_limits; None: the default target);
    `normalised`: a normalisation after the group's product amplifies its error (plan/amplification.py), by
    more than the reference's own rounding (`reference`, the judge's) allows or not."""
    if group.kind == "gemm":
        return gemm.configs(group, precision, tolerance, device)
    if group.kind == "conv":
        return conv.configs(group, precision, tolerance, device, normalised=normalised,
                            reference=reference)
    if group.kind == "row":
        return reduction.configs(group, device)
    if group.kind == "pool":
        return pool.configs(group, device)
    if group.kind == "scan":
        return scan.configs(group, device)
    if group.kind == "recurrent":
        return recurrent.configs(group, precision, tolerance, device)
    if group.kind == "moments":
        return moments.configs(group, device)
    return pointwise.configs(group, device)


def dominant(groups: list[Group]) -> Group:
    def weight(g: Group) -> tuple[int, int]:
        size = 1
        for s in g.space:
            size *= s
        return (-KIND_ORDER.index(g.kind), size)
    return max(groups, key=weight)


def variant_name(group: Group, config: dict, kernels: int) -> str:
    if group.kind in ("gemm", "conv"):
        base = "gemm_epilogue" if group.kind == "gemm" else "conv_implicit_gemm"
        name = f"{base}_bm{config['BM']}_bn{config['BN']}_bk{config['BK']}_w{config['num_warps']}"
        if group.reduced:
            name = name.replace("_epilogue", "_row_epilogue")
        if config.get("precision") not in (None, "ieee", "default"):
            name += f"_{config['precision']}"
        if config.get("persistent"):
            name += "_persistent"
        if config.get("tma"):
            name += "_tma"
        if config.get("SPLIT_K", 1) > 1:
            name += f"_splitk{config['SPLIT_K']}"
    elif group.kind == "row":
        name = f"row_{config['mode']}_br{config['BR']}" + (f"_bc{config['BC']}" if "BC" in config else "") + \
            f"_w{config['num_warps']}"
    elif group.kind == "recurrent":
        name = f"{group.anchor.attrs['kind'].split('_')[0].lower()}_steps_bm{config['BM']}_bn{config['BN']}" \
            f"_bk{config['BK']}_w{config['num_warps']}_{config['precision']}"
    else:
        name = f"{group.kind}_{'planar_' if config.get('mode') == 'planar' else ''}b{config['BLOCK']}" \
            f"_w{config['num_warps']}"
    return name + (f"_{kernels}kernels" if kernels > 1 else "")


def kernel_options(the_plan: Plan, precision: str, tolerance: float | None,
                   device: DeviceFacts | DeviceLimits | None = None,
                   reference: ReferenceRounding | None = None) -> dict[str, list[dict]]:
    """Each kernel's configurations, fitted to the device, at precisions the tolerance admits (a conv's main loop
    close to fp32 first where a norm after it amplifies its error past what the reference's own rounding,
    `reference`, allows: amplification.amplification_fails)."""
    users = the_plan.graph.users()
    return {g.name: group_configs(g, precision, tolerance, device, normalised=g.kind == "conv" and
                                  normalised(the_plan.graph, g.anchor.out, users), reference=reference)
            for g in the_plan.groups}


def variants(the_plan: Plan, precision: str, tolerance: float | None, limit: int,
             device: DeviceFacts | DeviceLimits | None = None) -> list[dict[str, dict]]:
    """Up to `limit` distinct choices of one configuration per kernel: the i-th of each kernel's list."""
    return first_choices(kernel_options(the_plan, precision, tolerance, device), limit)


def first_choices(lists: dict[str, list[dict]], limit: int) -> list[dict[str, dict]]:
    """Up to `limit` distinct choices of one configuration per kernel of `lists`: the i-th of each kernel's."""
    longest = max((len(v) for v in lists.values()), default=0)
    out: list[dict[str, dict]] = []
    for i in itertools.count():
        if len(out) >= limit or i >= longest:
            break
        choice = {name: configs[i % len(configs)] for name, configs in lists.items()}
        if choice not in out:
            out.append(choice)
    return out


def describe_plan(the_plan: Plan) -> str:
    """The kernels in order; a rolled loop's as one part (their own described with the loop)."""
    parts: list[str] = []
    outside: list[Group] = []
    in_loop = False
    for step in the_plan.steps:
        if isinstance(step, LoopStart):
            parts.append(describe_groups(outside))
            outside, in_loop = [], True
            loop = step.rolled.loop
            parts.append(f"a loop of {loop.count} steps, each: ({loop.described or 'views only'})")
        elif isinstance(step, LoopEnd):
            in_loop = False
        elif isinstance(step, Group) and not in_loop:
            outside.append(step)
    parts.append(describe_groups(outside))
    return "; ".join(p for p in parts if p)


def compose(problem_path: str | Path, *, set_values: dict | None = None, precision: str = "fp32",
            eval_mode: bool = False, max_variants: int = 4, tolerance: float | None = None,
            name: str | None = None, device: DeviceFacts | DeviceLimits | None = None,
            reference: ReferenceRounding | None = None) -> ComposeResult:
    """Triton candidates for a problem from the template library, or the ops that stop it. `name`, the
    problem's name in the kernels' docstrings, defaults to the file's (examples/<name>/problem.py: the
    folder's); a resumed run gives the one it started with, so that its kernels are the same code.
    `device`: the GPU the kernels are for; every tile configuration fits its shared memory, registers and
    threads per block (templates.device_limits). None: the typical target (device_limits.DEFAULT_LIMITS, an H100).
    `reference`: how the reference itself rounds, where the judge saw it (on a GPU its convolutions run TF32:
    then a conv's fast main loops lead even where a norm follows).

    Raises kfoundry.errors.ProblemError for a problem file that cannot be loaded or run; anything else the
    composer does not understand is reported in `unsupported`."""
    # it loads, runs and traces the problem in this process and compiles nothing: no torch._dynamo (dynamo_stand_in)
    with no_dynamo_import():
        sample = _load(problem_path, set_values, eval_mode)
        with on_host(sample.device):  # its forward is traced in the main process, which never touches the GPU
            result = _safe_compose(sample, precision, eval_mode, max(1, max_variants), tolerance, name, device,
                                   reference)
        if sample.device == "meta" and any(u == UNTRACEABLE or u.startswith("composer error")
                                           for u in result.unsupported):
            # what failed on the meta device (shapes only) may work with real data: once more on the CPU
            sample = _load(problem_path, set_values, eval_mode, "cpu")
            with on_host("cpu"):
                result = _safe_compose(sample, precision, eval_mode, max(1, max_variants), tolerance, name, device,
                                       reference)
    return result


def _safe_compose(sample: Sample, precision: str, eval_mode: bool, max_variants: int,
                  tolerance: float | None, name: str | None, device: DeviceFacts | DeviceLimits | None,
                  reference: ReferenceRounding | None = None) -> ComposeResult:
    try:
        return _compose(sample, precision, eval_mode, max_variants, tolerance, name, device, reference)
    except Exception as exc:  # noqa: BLE001 -- a composer bug must not stop a search: say so, produce nothing
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return ComposeResult([], [f"composer error ({type(exc).__name__})"],
                             f"The composer failed on this problem: {detail}", [traceback.format_exc(limit=4)])


def _load(problem_path: str | Path, set_values: dict | None, eval_mode: bool, device: str = "meta") -> Sample:
    """The problem built and run once: on the meta device (shapes only: instant at any size) when the problem
    allows it, else on the CPU, where a failure is the problem's."""
    if device == "meta":
        try:
            sample = load_sample(problem_path, set_values, eval_mode, "meta")
            with torch.no_grad():
                sample.model(*sample.inputs)
        except ProblemError:
            raise
        except Exception:  # noqa: BLE001 -- data-dependent code: build and run it for real instead
            sample = None
        if sample is not None:
            return sample
    try:
        sample = load_sample(problem_path, set_values, eval_mode, "cpu")
    except ProblemError:
        raise
    except Exception as exc:  # noqa: BLE001 -- the user's Model or get_inputs failed
        raise ProblemError(f"building the problem's model and inputs failed: {type(exc).__name__}: {exc}") from None
    try:
        with torch.no_grad():
            sample.model(*sample.inputs)
    except Exception as exc:  # noqa: BLE001 -- the user's forward failed
        raise ProblemError(f"the problem's forward raised {type(exc).__name__}: {exc}") from None
    return sample


def _compose(sample: Sample, precision: str, eval_mode: bool, max_variants: int,
             tolerance: float | None, name: str | None, device: DeviceFacts | DeviceLimits | None,
             reference: ReferenceRounding | None = None) -> ComposeResult:
    path = sample.source.path
    name = name or (path.parent.name if path.stem == "problem" else path.stem)  # examples/<name>/problem.py
    try:
        init = init_parts(sample.source.text)
    except InitError as exc:
        return ComposeResult([], ["Model"], f"Nothing composed for {name}: {exc}.")
    captured = capture(sample)
    unsupported = captured.unsupported or (check_graph(captured.graph) if captured.graph is not None else {})
    if unsupported:
        names = sorted(unsupported)
        if names == [UNTRACEABLE]:
            why = captured.notes[-1] if captured.notes else unsupported[UNTRACEABLE]
            return ComposeResult([], names, f"Nothing composed for {name}: neither torch.fx nor the dispatch-level "
                                 f"trace can read its forward ({why[:300]}).", captured.notes)
        # each op with the reason its handler gave, where it gave one
        described = [f"{n} ({unsupported[n]})" if unsupported[n] else n for n in names]
        return ComposeResult([], names, f"Nothing composed for {name}: the composer has no template for "
                             f"{', '.join(described)}.", captured.notes)
    graph = with_recurrences(copy_unwritten_outputs(captured.graph))
    # planning rewrites the graph: a second plan starts from a copy of it
    unplanned = copy.deepcopy(graph) if _tile_reduction_likely(graph) else None
    the_plan = plan_rolled(graph)
    if not the_plan.groups:
        return ComposeResult([], ["empty forward"], f"Nothing composed for {name}: the forward computes nothing.",
                             captured.notes)
    # a convolution followed by a norm: its variants gathering the norm's moments in the conv epilogue; one
    # followed by a pooling: those storing the pooled windows alone; and the plain ones, in turn
    gathered = with_conv_statistics(the_plan)
    plans = {key: p for key, p in ((("moments", "pooled"), gathered and with_pooling_before_store(gathered)),
                                   (("moments",), gathered), (("pooled",), with_pooling_before_store(the_plan)),
                                   ((), the_plan)) if p is not None}
    # a costly function ending a product's epilogue, computed in the norm's row kernel instead, is also first: which
    # side of the boundary pays less is for the GPU to say (on the H200, erf-GELU cost conv_suite 18's conv kernel
    # about a third of its time)
    tails = plan_with_tails_in_rows(copy.deepcopy(unplanned)) if unplanned is not None and not the_plan.loops \
        else None
    if tails is not None:
        plans[(TAIL_IN_ROW,)] = tails
    first = list(plans)  # the plans of the first variants; a reduction kept apart is the genome experts' to try
    if unplanned is not None and not the_plan.loops and any(g.reduced for g in the_plan.groups if g.anchor):
        plans[(REDUCTION_APART,)] = plan(unplanned, tile_reductions=False)

    def render(genome: Genome) -> tuple[str, str, dict[str, str]] | str:
        plan_ = plans[genome.plan]
        title = (f"Composed by Kernel Foundry's template composer for {name} ({captured.tracer} trace): "
                 f"{describe_plan(plan_)}.")
        functions: dict[str, str] = {}
        source = generate(plan_, init, genome.configs, sample.model, _wrap_doc(title), graphed=genome.graph,
                          launches=functions)
        problem = _self_check(source)
        if problem:
            return problem
        lead = dominant(plan_.groups)
        return source, variant_name(lead, genome.configs[lead.name], len(plan_.groups)) + \
            "".join(f"_{fusion}" for fusion in genome.plan) + ("_graph" if genome.graph else ""), functions

    # the graph gene wherever the forward can be captured: the first variants are replayed only where they launch
    # many kernels (graphable), but a forward of a few launches loses its host's time too (0.2 ms of 0.49 on
    # conv_suite 16 on the H200), and the genome experts' graph move measures whether a replay pays
    capturable = can_graph(init.forward_signature, init.forward_args)
    space = GenomeSpace({key: kernel_options(p, precision, tolerance, device, reference)
                         for key, p in plans.items()}, {key: capturable for key in plans}, render)
    candidates: list[ComposedCandidate] = []
    failures: list[str] = []
    for genome in _in_turn([[Genome(key, choice, graphed) for choice, graphed in _with_graph(
            plans[key], init, first_choices(space.options[key], max_variants), max_variants)]
            for key in first], max_variants):
        built = space.build(genome)
        if isinstance(built, str):
            failures.append(built)
            continue
        source, label = built
        while any(c.name == label for c in candidates):
            label += "_v"
        candidates.append(ComposedCandidate(label, source, genome.configs, genome))
    if not candidates:
        return ComposeResult([], ["composer self-check"], f"Nothing composed for {name}: {failures[0]}",
                             captured.notes)
    message = (f"Composed {len(candidates)} variant(s) of {len(the_plan.groups)} kernel(s) for {name}: "
               f"{describe_plan(the_plan)}" +
               "".join(f"; or {len(plans[key].groups)} kernel(s): {describe_plan(plans[key])}" for key in first
                       if plans[key] is not the_plan) + ".")
    return ComposeResult(candidates, [], message, captured.notes + failures, space)


def _tile_reduction_likely(graph: Graph) -> bool:
    """A GEMM or convolution and a reduction in one graph: a plan may reduce in the product's epilogue, or move a
    costly tail of it to the row kernel after it."""
    kinds = {category(op.name) for op in graph.ops}
    return "reduction" in kinds and bool(kinds & {"gemm", "conv"})


def graphable(the_plan: Plan, init: InitParts) -> bool:
    """Whether the plan's forward also comes replayed from a CUDA graph: it launches many kernels (a rolled loop,
    a recurrent layer's step kernel, a whole network) and its signature allows a static capture."""
    many = bool(the_plan.loops) or len(the_plan.groups) >= GRAPH_MIN_LAUNCH_SITES or \
        any(g.kind == "recurrent" for g in the_plan.groups)
    return many and can_graph(init.forward_signature, init.forward_args)


def _with_graph(the_plan: Plan, init: InitParts, choices: list[dict], limit: int) -> list[tuple[dict, bool]]:
    """The variants to write: each choice of tiles, and where the plan is graphable the first choice again
    replayed from a CUDA graph, second in the list (within the limit)."""
    plain = [(choice, False) for choice in choices]
    if not choices or not graphable(the_plan, init):
        return plain
    return (plain[:1] + [(choices[0], True)] + plain[1:])[:limit]


def _in_turn(lists: list[list], limit: int) -> list:
    """The first of each list, then the second of each, and so on, up to `limit` items."""
    out = [item for row in itertools.zip_longest(*lists) for item in row if item is not None]
    return out[:limit]


def _wrap_doc(text: str, width: int = 110) -> str:
    words, lines, current = text.split(), [], ""
    for word in words:
        if current and len(current) + 1 + len(word) > width:
            lines.append(current)
            current = word
        else:
            current = f"{current} {word}".strip()
    lines.append(current)
    return "\n".join(lines)


def _self_check(source: str) -> str | None:
    """A generated file must parse and pass the static guard's strict rules."""
    try:
        compile(source, "<composed>", "exec")
    except SyntaxError as exc:
        return f"generated code does not parse: {exc}"
    from kfoundry.guard.static import check_source

    findings = check_source(source)
    if findings:
        return "generated code breaks a guard rule: " + "; ".join(f.render() for f in findings[:3])
    return None
