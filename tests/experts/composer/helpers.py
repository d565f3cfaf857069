"""Shared by the composer's tests: fixture paths, composing and evaluating candidates with the real evaluator
(strict guard on) two at a time, and a reference interpreter of the composer's IR written with PyTorch ops.

`guard_runs=False` judges a candidate without the guard's extra runs (kernels off, refilled, moved and outlier
inputs: on the interpreter more runs than its trial and repeat), its static rules and its checks of what the trials
ran still on (tests/guard/test_corpus.py). A test whose claim is a candidate's correctness asks for it where the
evaluation is long, and says so. Judged with every run, by template family: pointwise (templates/test_pointwise.py),
pooling (templates/test_pool.py), rows (templates/test_reduction.py's example and norms, read/test_norm.py), GEMM
(templates/test_gemm.py's `composed`), convolution (templates/test_conv.py's GUARDED), a norm's moments in a conv's
epilogue (plan/test_conv_statistics.py's GUARDED), pooled stores (plan/test_window_store.py, but for
CORRECTNESS_ONLY), scans (plan/test_scans.py, test_compose.py's coverage problems), recurrences
(templates/test_recurrent.py's fp16 candidate, plan/test_recurrence.py, plan/test_rolling.py); and
tests/guard/test_golden.py holds the static guard's verdict on every golden candidate."""

from __future__ import annotations

import itertools
import math
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

from kfoundry.experts.composer.compose import ComposedCandidate, ComposeResult, compose
from kfoundry.experts.composer.ir.graph import Graph, Value

TESTS = Path(__file__).resolve().parents[2]
FIXTURES = TESTS / "fixtures" / "composer"
EXAMPLES = TESTS.parent / "examples"
EXAMPLE_SIZES = {
    "conv_relu": {"batch_size": 2, "in_channels": 3, "out_channels": 8, "height": 6, "width": 7},
    "layernorm": {"batch_size": 8, "dim": 100},
    "linear_epilogue": {"batch_size": 16, "in_features": 40, "out_features": 24},
    "pointwise_chain": {"batch_size": 32, "dim": 64},
    "row_softmax": {"batch_size": 16, "dim": 100},
}
EVAL_SEED = 20240611
# a vanilla RNN as a Python loop over 256 steps (a network_suite problem), and small sizes to compose it at
RNN_LOOP = TESTS.parent / "benchmarks" / "network_suite" / "7_vanilla_rnn_loop.py"
RNN_SIZES = {"batch_size": 2, "input_size": 4, "hidden_size": 8, "output_size": 3}

# a convolution and the norms that may follow it (plan/conv_statistics.py, plan/window_store.py): fields {conv},
# {d} (its dims), {ln} (a LayerNorm's shape), {field} (the sizes after the channels of a tensor as large as the
# conv output), {tail} (forward's return, of the conv output y) and {input}
CONV_NORM_TEMPLATE = '''
import torch
from torch import nn
from torch.nn import functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = {conv}
        self.gn = nn.GroupNorm(2, 8)
        self.bn = nn.BatchNorm{d}d(8)
        self.inorm = nn.InstanceNorm{d}d(8, affine=True)
        self.ln = nn.LayerNorm({ln})
        self.scale = nn.Parameter(torch.randn(8, *[1] * {d}))  # of either sign
        self.field = nn.Parameter(torch.randn(8, {field}))
        with torch.no_grad():  # not the identity affine of a fresh norm
            for norm in (self.gn, self.bn, self.inorm):
                norm.weight.add_(0.2 * torch.randn(8))
                norm.bias.add_(0.2 * torch.randn(8))

    def forward(self, x):
        y = self.conv(x)
        return {tail}


def get_inputs():
    return [torch.randn({input})]


def get_init_inputs():
    return []
'''


def conv_norm_problem(path: Path, fields: dict[str, str]) -> Path:
    """CONV_NORM_TEMPLATE with `fields` filled in, written to `path`."""
    text = CONV_NORM_TEMPLATE
    for key, value in fields.items():
        text = text.replace("{" + key + "}", value)
    path.write_text(text)
    return path


# evaluations run in worker processes: two at a time keep both cores busy
_POOL = ThreadPoolExecutor(max_workers=2)
_DIR = Path(tempfile.mkdtemp(prefix="kfoundry-composer-tests-"))
_COUNT = itertools.count()


def fixture(name: str) -> Path:
    return FIXTURES / f"{name}.py"


def example(name: str) -> Path:
    return EXAMPLES / name / "problem.py"


def write_candidate(source: str, label: str = "candidate") -> Path:
    path = _DIR / f"{label}_{next(_COUNT)}.py"
    path.write_text(source)
    return path


def _evaluate_all(problem: Path, paths: list[Path], options) -> list:
    from kfoundry.evaluate import Evaluator

    with Evaluator(problem, options, spare=False) as evaluator:  # the reference runs once for all of them
        results = []
        for path in paths:
            results.append(evaluator.evaluate(path))
        return results


def submit_all(problem: Path, sources: list[str], set_values: dict | None = None, eval_mode: bool = False,
               label: str = "candidate", precision: str = "fp32", tolerance: float | None = None,
               guard_runs: bool = True) -> Future:
    """Evaluate candidate sources on the CPU in the background; the future gives their Evaluations."""
    from kfoundry.evaluate import EvalOptions

    paths = [write_candidate(source, label) for source in sources]
    options = EvalOptions(device="cpu", trials=1, seed=EVAL_SEED, set_values=dict(set_values or {}),
                          eval_mode=eval_mode, measure_device=False, timeout_s=240, precision=precision,
                          tolerance=tolerance, guard_runs=guard_runs)
    return _POOL.submit(_evaluate_all, problem, paths, options)


def submit(problem: Path, source: str, set_values: dict | None = None, eval_mode: bool = False,
           label: str = "candidate", precision: str = "fp32", tolerance: float | None = None,
           guard_runs: bool = True) -> Future:
    """Evaluate one candidate source on the CPU in the background; the future gives its Evaluation."""
    future = submit_all(problem, [source], set_values, eval_mode, label, precision, tolerance, guard_runs)
    single: Future = Future()
    future.add_done_callback(lambda f: single.set_exception(f.exception()) if f.exception()
                             else single.set_result(f.result()[0]))
    return single


def compose_then_judge(problems: dict[str, Path], judged_sources: Callable[[str, ComposeResult], list[str]],
                       max_variants: Callable[[str], int] = lambda case: 4, tolerance: float = 1e-4,
                       guard_runs: Callable[[str], bool] = lambda case: True
                       ) -> dict[str, tuple[ComposeResult, Future]]:
    """case -> (its problem composed in this process, the future of the sources `judged_sources` picks from it,
    judged in the background two problems at a time, with the guard's extra runs where `guard_runs(case)`)."""
    found = {}
    for case, path in problems.items():
        result = compose(path, max_variants=max_variants(case), tolerance=tolerance)
        found[case] = (result, submit_all(path, judged_sources(case, result), tolerance=tolerance,
                                          guard_runs=guard_runs(case)))
    return found


def retiled(source: str, bm: int) -> str:
    """`source` with the conv's BM set to `bm` as the tuner sets it (its BM tunable, rewritten in place)."""
    from kfoundry.experts.tunables import find_tunables
    from kfoundry.experts.tunables.tunable import apply_values

    tunables = [t for t in find_tunables(source) if t.name == "BM"]
    assert len(tunables) == 1, [t.name for t in find_tunables(source)]
    changed = apply_values(source, tunables, {"BM": bm})
    assert changed is not None and changed != source
    return changed


def compose_ok(problem: Path, **kwargs: Any) -> ComposeResult:
    result = compose(problem, **kwargs)
    assert result.candidates, f"{problem.name}: {result.message} {result.notes}"
    assert not result.unsupported
    return result


def first(result: ComposeResult) -> ComposedCandidate:
    return result.candidates[0]


TF32_LEVEL = ("tf32", "fp16")  # dot precisions with TF32's rounding: the fp32 tolerance rejects them, on a CPU too


def first_exact(result: ComposeResult) -> ComposedCandidate:
    """The first candidate none of whose dots rounds its operands to TF32's 10 bits (the CPU emulates a GPU's
    dot precision: kfoundry.evaluate.worker.emulated_precision)."""
    for candidate in result.candidates:
        if not any(config.get("precision") in TF32_LEVEL for config in candidate.config.values()):
            return candidate
    raise AssertionError(f"no variant at fp32 accuracy among {[c.name for c in result.candidates]}")


def verdict(future: Future | Any) -> str:
    evaluation = future.result() if isinstance(future, Future) else future
    assert evaluation.status == "ok", f"{evaluation.status}: {evaluation.message}\n{evaluation.candidate}"
    return evaluation.status


def check_variants(result: ComposeResult) -> None:
    """Every variant parses, defines ModelNew, and variants differ in their configuration."""
    configs = []
    for candidate in result.candidates:
        compile(candidate.source, candidate.name, "exec")
        assert "class ModelNew(" in candidate.source
        assert candidate.config not in configs
        configs.append(candidate.config)
    assert len({c.name for c in result.candidates}) == len(result.candidates)


# -- a reference interpreter of the IR ---------------------------------------------------------------------
_UNARY = {
    "identity": lambda x: x, "neg": torch.neg, "abs": torch.abs, "relu": torch.relu, "relu6": F.relu6,
    "sigmoid": torch.sigmoid, "tanh": torch.tanh, "exp": torch.exp, "exp2": torch.exp2, "log": torch.log,
    "log2": torch.log2, "log10": torch.log10, "log1p": torch.log1p, "expm1": torch.expm1, "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal, "square": torch.square, "sin": torch.sin,
    "cos": torch.cos, "erf": torch.erf, "floor": torch.floor, "ceil": torch.ceil, "round": torch.round,
    "trunc": torch.trunc, "sign": torch.sign, "silu": F.silu, "mish": F.mish, "selu": F.selu,
    "softsign": F.softsign, "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid, "logsigmoid": F.logsigmoid,
    "logical_not": torch.logical_not,
}
_BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "maximum": torch.maximum, "minimum": torch.minimum,
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
    "logical_and": torch.logical_and, "logical_or": torch.logical_or, "remainder": torch.remainder,
    "fmod": torch.fmod,
}


def _tensor(v: Any) -> Any:
    return v if isinstance(v, torch.Tensor) else torch.tensor(v)


def _recurrent(projected, w_hh, b_hh, h, c, kind: str, time: int) -> torch.Tensor:
    """One recurrent layer, step by step: (hidden states,) or (hidden, cell) states stacked along time."""
    hidden = w_hh.shape[1]
    hs, cs = [], []
    for t in range(projected.shape[time]):
        x = projected.select(time, t)
        hp = h @ w_hh.T if h is not None else torch.zeros(x.shape[0], w_hh.shape[0])
        if kind == "GRU":
            hp = hp + b_hh if b_hh is not None else hp
            xr, xz, xn = x.split(hidden, -1)
            hr, hz, hn = hp.split(hidden, -1)
            r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
            h = (1 - z) * torch.tanh(xn + r * hn) + z * (h if h is not None else 0)
        elif kind == "LSTM":
            i, f, g, o = (x + hp).split(hidden, -1)
            c = torch.sigmoid(i) * torch.tanh(g) + torch.sigmoid(f) * (c if c is not None else 0)
            h = torch.sigmoid(o) * torch.tanh(c)
            cs.append(c)
        else:
            h = torch.tanh(x + hp) if kind == "RNN_TANH" else torch.relu(x + hp)
        hs.append(h)
    states = [torch.stack(hs, time)] + ([torch.stack(cs, time)] if cs else [])
    return torch.stack(states, 0)


def run_ir(graph: Graph, feeds: dict[Value, Any]) -> list[torch.Tensor]:
    """The graph's outputs computed with PyTorch, op by op."""
    env: dict[Value, Any] = dict(feeds)

    def val(a: Any) -> Any:
        if isinstance(a, Value):
            return env[a] if a.kind != "const" else a.concrete
        if isinstance(a, (list, tuple)):
            return type(a)(val(x) for x in a)
        return a

    for op in graph.ops:
        if op.name == "sym_attr":  # a number of the model's: feeds_for reads it
            continue
        args = [val(a) for a in op.args]
        at = {k: val(v) for k, v in op.attrs.items()}
        name = op.name
        if name in _UNARY:
            out = _UNARY[name](args[0])
        elif name in _BINARY:
            out = _BINARY[name](args[0], args[1]) if isinstance(args[0], torch.Tensor) else \
                _BINARY[name](_tensor(args[0]), args[1])
        elif name == "div":
            out = torch.div(args[0], args[1], rounding_mode=at.get("rounding_mode"))
        elif name == "pow":
            out = torch.pow(args[0], args[1])
        elif name == "where":
            out = torch.where(args[0].bool(), args[1], args[2])
        elif name == "gelu":
            out = F.gelu(args[0], approximate=at["approximate"])
        elif name == "leaky_relu":
            out = F.leaky_relu(args[0], at["slope"])
        elif name == "elu":
            x = args[0]
            negative = at["alpha"] * at["scale"] * (torch.exp(x * at["input_scale"]) - 1)
            out = torch.where(x > 0, x * at["scale"], negative)
        elif name == "softplus":
            out = F.softplus(args[0], at["beta"], at["threshold"])
        elif name == "clamp":
            out = torch.clamp(args[0], at["min"], at["max"])
        elif name == "iota":
            x, dim = args[0], at["dim"]
            shape = [1] * x.dim()
            shape[dim] = x.shape[dim]
            out = torch.arange(x.shape[dim]).reshape(shape).expand(x.shape)
        elif name == "full":
            out = torch.full(tuple(at["sizes"]), at["value"], dtype=at["dtype"])
        elif name == "flip":
            out = torch.flip(args[0], at["dims"])
        elif name == "roll":
            out = torch.roll(args[0], [s for _, s in at["moves"]], [d for d, _ in at["moves"]])
        elif name == "pad":
            widths = [0, 0] * args[0].dim()
            for dim, before, after in at["moves"]:
                k = args[0].dim() - 1 - dim
                widths[2 * k:2 * k + 2] = [before, after]
            while widths[-2:] == [0, 0]:
                widths = widths[:-2]
            out = F.pad(args[0], widths, at["mode"], at["value"] if at["mode"] == "constant" else None)
        elif name == "cat":
            out = torch.cat(args, at["dim"])
        elif name == "recurrent" and at.get("reverse"):  # the steps from the last back: the same on flipped time
            projected, *rest = args
            out = _recurrent(projected.flip(at["time"]), *rest, at["kind"], at["time"]).flip(at["time"] + 1)
        elif name == "recurrent":
            out = _recurrent(*args, at["kind"], at["time"])
        elif name == "threshold":
            out = F.threshold(args[0], at["threshold"], at["value"])
        elif name == "cast":
            out = args[0].to(at["dtype"])
        elif name in ("sum", "amax", "amin"):
            out = getattr(torch, name)(args[0], dim=at["dims"], keepdim=at["keepdim"])
        elif name == "mean":
            n = math.prod(args[0].shape[d] for d in at["dims"])
            out = torch.sum(args[0], dim=at["dims"], keepdim=at["keepdim"]) / (n - at.get("correction", 0))
        elif name in ("argmax", "argmin"):
            out = getattr(torch, name)(args[0], dim=at["dim"], keepdim=at["keepdim"])
        elif name in ("cumsum", "cumprod"):
            x, dim = args[0], at["dim"]
            x = x.flip(dim) if at.get("reverse") else x
            out = getattr(torch, name)(x, dim=dim)
            if at.get("exclusive"):
                first = torch.full_like(out.narrow(dim, 0, 1), 1.0 if name == "cumprod" else 0.0)
                out = torch.cat([first, out.narrow(dim, 0, out.shape[dim] - 1)], dim)
            out = out.flip(dim) if at.get("reverse") else out
        elif name == "matmul":
            out = torch.matmul(args[0], args[1])
        elif name == "conv":
            fn = getattr(F, f"conv{'_transpose' if at['transposed'] else ''}{len(at['stride'])}d")
            if at["transposed"]:
                out = fn(args[0], args[1], None, at["stride"], at["padding"], at["output_padding"], at["groups"],
                         at["dilation"])
            else:
                out = fn(args[0], args[1], None, at["stride"], at["padding"], at["dilation"], at["groups"])
        elif name == "max_pool":
            out = getattr(F, f"max_pool{len(at['kernel'])}d")(args[0], at["kernel"], at["stride"], at["padding"],
                                                              at["dilation"], at["ceil_mode"])
        elif name == "avg_pool":
            out = getattr(F, f"avg_pool{len(at['kernel'])}d")(args[0], at["kernel"], at["stride"], at["padding"],
                                                              at["ceil_mode"], at["count_include_pad"],
                                                              at["divisor_override"])
        elif name in ("adaptive_avg_pool", "adaptive_max_pool"):
            kind = "avg" if "avg" in name else "max"
            out = getattr(F, f"adaptive_{kind}_pool{len(at['output_size'])}d")(args[0], at["output_size"])
        elif name == "reshape":
            out = args[0].reshape(*at["sizes"])
        elif name == "expand":
            out = args[0].expand(*at["sizes"])
        elif name == "permute":
            out = args[0].permute(*at["dims"])
        elif name == "transpose":
            out = args[0].transpose(at["dim0"], at["dim1"])
        elif name == "unsqueeze":
            out = args[0].unsqueeze(at["dim"])
        elif name == "squeeze":
            out = args[0].squeeze(at["dims"]) if at["dims"] is not None else args[0].squeeze()
        elif name == "flatten":
            out = args[0].flatten(at["start"], at["end"])
        elif name == "slice":
            index = [slice(None)] * args[0].dim()
            index[at["dim"]] = slice(at["start"], at["stop"], at["step"])
            out = args[0][tuple(index)]
        elif name == "select":
            out = args[0].select(at["dim"], at["index"])
        elif name == "unfold":
            out = args[0].unfold(at["dim"], at["size"], at["step"])
        elif name == "sym_size":
            out = args[0].shape[at["dim"]]
        elif name == "sym_numel":
            out = args[0].numel()
        elif name.startswith("sym_"):
            import operator

            fn = {"sym_add": operator.add, "sym_sub": operator.sub, "sym_mul": operator.mul,
                  "sym_floordiv": operator.floordiv, "sym_mod": operator.mod, "sym_truediv": operator.truediv,
                  "sym_pow": operator.pow}
            out = -args[0] if name == "sym_neg" else fn[name](args[0], args[1])
        else:
            raise KeyError(name)
        env[op.out] = out
    return [env[v] for v in graph.outputs]


def feeds_for(graph: Graph, model: torch.nn.Module, inputs: list) -> dict[Value, Any]:
    """The graph's inputs and parameters bound to a model's tensors, and its numbers to the model's."""
    feeds: dict[Value, Any] = {}
    for value in graph.inputs:
        feeds[value] = inputs[value.index] if value.kind == "input" else value.concrete
    for path, value in list(graph.params.items()) + [(op.attrs["path"], op.out) for op in graph.ops
                                                     if op.name == "sym_attr"]:
        owner, _, attr = path.rpartition(".")
        feeds[value] = getattr(model.get_submodule(owner) if owner else model, attr)
    return feeds


def read_model(model: torch.nn.Module, inputs: list, aten: bool = False) -> Graph:
    """The IR of a model, read from the torch.fx trace (or the dispatch-level one)."""
    from kfoundry.experts.composer.read.lower_aten import read_aten_graph
    from kfoundry.experts.composer.read.lower_fx import read_graph
    from kfoundry.experts.composer.read.trace import trace_dispatch, trace_fx

    if aten:
        return read_aten_graph(trace_dispatch(model, inputs))
    return read_graph(trace_fx(model, inputs))


def assert_ir_matches(model: torch.nn.Module, inputs: list, aten: bool = False, atol: float = 1e-5) -> Graph:
    """Reading the model loses nothing: the IR, run with PyTorch, gives the model's outputs."""
    def fresh() -> list:  # a forward may change its inputs in place
        return [v.clone() if isinstance(v, torch.Tensor) else v for v in inputs]

    with torch.no_grad():
        expected = model(*fresh())
        graph = read_model(model, fresh(), aten)
        got = run_ir(graph, feeds_for(graph, model, fresh()))
    expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, e.shape, g.dtype, e.dtype)
        if e.is_floating_point():
            torch.testing.assert_close(g, e, atol=atol, rtol=1e-5)
        else:
            assert torch.equal(g, e)
    return graph
