"""Every pointwise expression, run in Triton's interpreter, matches PyTorch."""

import importlib.util
import math

import pytest
import torch
import torch.nn.functional as F

from kfoundry.experts.composer.emit.expr import HELPERS, literal, pointwise

pytestmark = pytest.mark.filterwarnings("ignore:divide by zero")

CASES = {
    # name: (op, attrs, second operand: None / "tensor" / a constant, PyTorch reference)
    "neg": ("neg", {}, None, torch.neg), "abs": ("abs", {}, None, torch.abs), "relu": ("relu", {}, None, torch.relu),
    "relu6": ("relu6", {}, None, lambda a: F.relu6(a * 4)), "sigmoid": ("sigmoid", {}, None, torch.sigmoid),
    "tanh": ("tanh", {}, None, torch.tanh), "exp": ("exp", {}, None, torch.exp), "exp2": ("exp2", {}, None, torch.exp2),
    "log": ("log", {}, None, lambda a: torch.log(a.abs() + 0.1)), "sqrt": ("sqrt", {}, None, lambda a: a.abs().sqrt()),
    "rsqrt": ("rsqrt", {}, None, lambda a: (a.abs() + 0.1).rsqrt()), "erf": ("erf", {}, None, torch.erf),
    "log2": ("log2", {}, None, lambda a: torch.log2(a.abs() + 0.1)),
    "log10": ("log10", {}, None, lambda a: torch.log10(a.abs() + 0.1)),
    "log1p": ("log1p", {}, None, lambda a: torch.log1p(a.abs())), "expm1": ("expm1", {}, None, torch.expm1),
    "reciprocal": ("reciprocal", {}, None, lambda a: 1 / (a.abs() + 0.1)), "square": ("square", {}, None, torch.square),
    "sin": ("sin", {}, None, torch.sin), "cos": ("cos", {}, None, torch.cos), "floor": ("floor", {}, None, torch.floor),
    "ceil": ("ceil", {}, None, torch.ceil), "round": ("round", {}, None, lambda a: torch.round(a * 2)),
    "trunc": ("trunc", {}, None, lambda a: torch.trunc(a * 3)), "sign": ("sign", {}, None, torch.sign),
    "silu": ("silu", {}, None, F.silu), "mish": ("mish", {}, None, F.mish), "selu": ("selu", {}, None, F.selu),
    "softsign": ("softsign", {}, None, F.softsign), "hardswish": ("hardswish", {}, None, lambda a: F.hardswish(a * 4)),
    "hardsigmoid": ("hardsigmoid", {}, None, lambda a: F.hardsigmoid(a * 4)),
    "logsigmoid": ("logsigmoid", {}, None, lambda a: F.logsigmoid(a * 10)),
    "gelu": ("gelu", {"approximate": "none"}, None, F.gelu),
    "gelu_tanh": ("gelu", {"approximate": "tanh"}, None, lambda a: F.gelu(a, approximate="tanh")),
    "leaky_relu": ("leaky_relu", {"slope": 0.1}, None, lambda a: F.leaky_relu(a, 0.1)),
    "elu": ("elu", {"alpha": 0.7, "scale": 1.5, "input_scale": 2.0},
            None, lambda a: torch.where(a > 0, a * 1.5, 0.7 * 1.5 * (torch.exp(a * 2.0) - 1))),
    "softplus": ("softplus", {"beta": 2.0, "threshold": 3.0}, None, lambda a: F.softplus(a * 4, 2.0, 3.0)),
    "clamp": ("clamp", {"min": -0.5, "max": None}, None, lambda a: a.clamp(min=-0.5)),
    "threshold": ("threshold", {"threshold": 0.2, "value": -1.0}, None, lambda a: F.threshold(a, 0.2, -1.0)),
    "cast_half": ("cast", {"dtype": torch.float16}, None, lambda a: a.half().float()),
    "cast_long": ("cast", {"dtype": torch.int64}, None, lambda a: (a * 5).long().float()),
    "add": ("add", {}, "tensor", torch.add), "sub": ("sub", {}, "tensor", torch.sub),
    "mul": ("mul", {}, "tensor", torch.mul), "div": ("div", {}, "tensor", torch.div),
    "div_floor": ("div", {"rounding_mode": "floor"}, "tensor", lambda a, b: torch.div(a * 5, b, rounding_mode="floor")),
    "div_trunc": ("div", {"rounding_mode": "trunc"}, "tensor", lambda a, b: torch.div(a * 5, b, rounding_mode="trunc")),
    "maximum": ("maximum", {}, "tensor", torch.maximum), "minimum": ("minimum", {}, "tensor", torch.minimum),
    "gt": ("gt", {}, "tensor", lambda a, b: (a > b).float()), "le": ("le", {}, "tensor", lambda a, b: (a <= b).float()),
    "remainder": ("remainder", {}, "tensor", lambda a, b: torch.remainder(a * 5, b)),
    "fmod": ("fmod", {}, "tensor", lambda a, b: torch.fmod(a * 5, b)),
    "pow_tensor": ("pow", {}, "tensor", lambda a, b: torch.pow(a.abs() + 0.1, b)),
    "pow_2": ("pow", {}, 2.0, lambda a: a ** 2), "pow_3": ("pow", {}, 3, lambda a: a ** 3),
    "pow_half": ("pow", {}, 0.5, lambda a: a.abs() ** 0.5), "pow_5": ("pow", {}, 5, lambda a: a ** 5),
    "pow_neg": ("pow", {}, -1.5, lambda a: (a.abs() + 0.1) ** -1.5),
}
# inputs the reference functions above transform, applied to the kernel's operand too
PREPARE = {"relu6": lambda a: a * 4, "log": lambda a: a.abs() + 0.1, "sqrt": lambda a: a.abs(),
           "rsqrt": lambda a: a.abs() + 0.1, "log2": lambda a: a.abs() + 0.1, "log10": lambda a: a.abs() + 0.1,
           "log1p": lambda a: a.abs(), "reciprocal": lambda a: a.abs() + 0.1, "round": lambda a: a * 2,
           "trunc": lambda a: a * 3, "hardswish": lambda a: a * 4, "hardsigmoid": lambda a: a * 4,
           "logsigmoid": lambda a: a * 10, "softplus": lambda a: a * 4, "cast_long": lambda a: a * 5,
           "div_floor": lambda a: a * 5, "div_trunc": lambda a: a * 5, "remainder": lambda a: a * 5,
           "fmod": lambda a: a * 5, "pow_tensor": lambda a: a.abs() + 0.1, "pow_half": lambda a: a.abs(),
           "pow_neg": lambda a: a.abs() + 0.1}


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    used: set[str] = set()
    bodies = []
    for name, (op, attrs, second, _) in CASES.items():
        scalar = second is not None and second != "tensor"
        args = ["a"] + (["b"] if second == "tensor" else [literal(second)] if scalar else [])
        text = pointwise(op, args, attrs, [False] + ([scalar] if second is not None else []), used)
        bodies.append(f'''
@triton.jit
def k_{name}(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(x_ptr + offs, mask=mask, other=0.0)
    b = tl.load(y_ptr + offs, mask=mask, other=1.0)
    o = {text}
    tl.store(o_ptr + offs, o.to(tl.float32), mask=mask)
''')
    source = "import triton\nimport triton.language as tl\n\n" + "\n".join(HELPERS[h] for h in sorted(used)) + \
        "\n".join(bodies)
    path = tmp_path_factory.mktemp("expr") / "expr_kernels.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("expr_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", sorted(CASES))
def test_expression_matches_pytorch(kernels, name):
    _op, _attrs, second, reference = CASES[name]
    torch.manual_seed(0)
    x = torch.randn(64) * 2
    x[0], x[1] = 0.0, 0.5  # edges: zero, a rounding tie
    y = torch.rand(64) + 0.5
    out = torch.empty(64)
    prepared = PREPARE.get(name, lambda a: a)(x)
    getattr(kernels, f"k_{name}")[(1,)](prepared, y, out, 64, BLOCK=64)
    expected = reference(x, y) if second == "tensor" else reference(x)
    torch.testing.assert_close(out, expected.float(), atol=2e-6, rtol=2e-5)


def test_literals():
    assert literal(True) == "True" and literal(3) == "3" and literal(0.1) == "0.1"
    assert literal(math.inf) == 'float("inf")' and literal(-math.inf) == '-float("inf")'
    assert literal(math.nan) == 'float("nan")'
    with pytest.raises(KeyError):
        pointwise("fft", ["a"], {}, [False], set())


def _channels_last_module(tmp_path):
    source = "import torch\nimport triton\nimport triton.language as tl\n\n" + HELPERS["_channels_last"]
    path = tmp_path / "channels_last.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("channels_last", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_channels_last_copy_rounds_to_the_nearest_tf32_value(tmp_path):
    module = _channels_last_module(tmp_path)
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4, 5) * 100
    x[0, 0, 0, :4] = torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0])
    # a tie: 1 + 2^-11 + (half a TF32 ulp) lies halfway between two TF32 values; ties go away from zero
    x[0, 0, 1, 0] = 1.0 + 2.0 ** -11
    plain = module._channels_last(x)  # on the CPU, never rounded: the interpreter's dot is exact fp32
    assert torch.equal(plain.nan_to_num(), x.permute(0, 2, 3, 1).nan_to_num())
    out = torch.empty(2, 4, 5, 3)
    module._channels_last_kernel[(1, 1, 2)](x, out, out, 3, 20, 4, 5, x.stride(0), x.stride(1), 0, x.stride(2),
                                           x.stride(3), FLAT=True, ROUND_TF32=True, MODE=0, BS=64, BC=32)
    want = x.permute(0, 2, 3, 1)
    finite = torch.isfinite(want)
    bits = out[finite].view(torch.int32)
    assert bool(((bits & 0x1FFF) == 0).all())  # 10 mantissa bits left
    ulp = torch.ldexp(torch.ones_like(want[finite]), torch.frexp(want[finite]).exponent - 11)
    assert bool(((out[finite] - want[finite]).abs() <= ulp / 2).all())  # the nearest one
    assert out[0, 1, 0, 0] == 1.0 + 2.0 ** -10
    assert out[0, 0, 0, 0] == float("inf") and out[0, 0, 1, 0] == float("-inf") and out[0, 0, 2, 0].isnan()


@pytest.mark.parametrize("magnitude", [1e6, 1e-7])
def test_the_half_copy_holds_tf32_values_scaled_by_a_power_of_two(tmp_path, magnitude):
    """The fp16 copy (the kernel's modes 1 and 2, and 3 then 4, run here by the interpreter: on the CPU
    `_channels_last_half` itself gives the plain copy): the largest magnitude found, a power-of-two scale that
    brings it under 2**14 (values far beyond fp16's range either way), and every value the input's copy times
    that scale, exactly (the TF32 rounding is a GPU's only, as for every copy: the test above runs it)."""
    module = _channels_last_module(tmp_path)
    torch.manual_seed(0)
    x = torch.randn(2, 40, 3, 5) * magnitude  # (N, C, H, W) seen through a transposed view below
    x = x.transpose(2, 3)
    stats = torch.zeros(2)
    out = torch.empty(2, 5, 3, 40, dtype=torch.float16)
    module._channels_last_launch(x, out, stats, 1, True)
    assert stats[0] == x.abs().max()
    module._channels_last_launch(x, out, stats, 2, True)
    scale = float(stats[1])
    assert scale == 2.0 ** (14 - math.ceil(math.log2(float(stats[0]))))
    rounded = torch.empty(2, 5, 3, 40)
    module._channels_last_launch(x, rounded, rounded, 0, True)  # the plain copy
    want = x.permute(0, 2, 3, 1)
    assert bool((out.float().abs() <= 2.0 ** 14).all())
    assert torch.equal(out.float(), (rounded * scale).to(torch.float16).float())
    assert torch.allclose(out.float() / scale, want, rtol=2.0 ** -11, atol=0)
    # the one-pass pair: the copy at scale 1 with the largest magnitude (mode 3), then mode 2 again where
    # scale 1 does not fit it (mode 4): here it does not, so the result is mode 2's
    one_pass = torch.full((2, 5, 3, 40), float("nan"), dtype=torch.float16)
    pair_stats = torch.zeros(2)
    module._channels_last_launch(x, one_pass, pair_stats, 3, True)
    assert pair_stats[0] == x.abs().max() and pair_stats[1] == 1.0
    module._channels_last_launch(x, one_pass, pair_stats, 4, True)
    assert float(pair_stats[1]) == scale and torch.equal(one_pass, out)
    copy, plain_stats = module._channels_last_half(x)  # the CPU: fp32, scale 1
    assert copy.dtype == torch.float32 and torch.equal(copy, want) and plain_stats.tolist() == [0.0, 1.0]


@pytest.mark.parametrize("magnitude", [1.0, 1000.0])
def test_a_tensor_that_fits_fp16_at_scale_1_is_copied_in_one_pass(tmp_path, magnitude):
    """Largest magnitude in [1, 2**15): mode 3's copy at scale 1 stands, and mode 4 stores nothing."""
    module = _channels_last_module(tmp_path)
    torch.manual_seed(1)
    x = torch.randn(2, 40, 3, 5)
    x = x / x.abs().max() * magnitude * 1.5
    out = torch.empty(2, 3, 5, 40, dtype=torch.float16)
    stats = torch.zeros(2)
    module._channels_last_launch(x, out, stats, 3, True)
    first = out.clone()
    out[0, 0, 0, 0] = 7.0  # a mark: mode 4 must leave it
    module._channels_last_launch(x, out, stats, 4, True)
    assert stats.tolist() == [float(x.abs().max()), 1.0]
    assert out[0, 0, 0, 0] == 7.0 and torch.equal(out.flatten()[1:], first.flatten()[1:])
    assert torch.equal(first, x.permute(0, 2, 3, 1).to(torch.float16))


def _helper_module(tmp_path, name: str):
    source = "import torch\nimport triton\nimport triton.language as tl\n\n" + HELPERS[name]
    path = tmp_path / f"{name.strip('_')}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name.strip("_"), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("case", ["rows", "columns", "batched_columns", "broadcast_batch", "strided"])
def test_the_fp16x3_split_holds_22_bits_of_every_row(tmp_path, case):
    """hi + lo / 2**11 times a power of two per row gives each value back to 22 significant bits of its row's
    largest magnitude (fp32 has 24), with no overflow: rows of magnitudes from 1e-30 to 1e30 and a row of zeros;
    K along the last dim (A of a GEMM) or the one before (B), batched or not, through strided views."""
    module = _helper_module(tmp_path, "_split_fp16x3")
    tiles = {"rows": "other", "columns": "other", "batched_columns": "other", "broadcast_batch": "k", "strided": "other"}
    launched = []
    real = module._split_fp16x3_kernel
    module._split_fp16x3_kernel = type("Spy", (), {"__getitem__": lambda self, grid: (
        lambda *args, **kw: (launched.append((kw["BR"], kw["BK"])), real[grid](*args, **kw)))})()
    torch.manual_seed(0)
    magnitudes = torch.tensor([1e-30, 1e-7, 1.0, 3e4, 1e30, 0.0, 1.0])
    if case == "rows":  # (R, K), a transposed view of a (K, R) tensor
        t, k_dim = (torch.randn(300, 7) * magnitudes).t(), -1
    elif case == "columns":  # (K, R), K-major already
        t, k_dim = torch.randn(300, 7) * magnitudes, -2
    elif case == "batched_columns":
        t, k_dim = torch.randn(2, 300, 7) * magnitudes, -2
    elif case == "broadcast_batch":  # a batch of one, expanded: the stride-0 batch of a bmm's broadcast operand
        t, k_dim = ((torch.randn(7, 300) * magnitudes[:, None]).unsqueeze(0)).expand(3, 7, 300), -1
    else:  # neither K nor the rows contiguous: every other column of a wider tensor
        t, k_dim = (torch.randn(7, 600) * magnitudes[:, None])[:, ::2], -1
    hi, lo, inv = module._split_fp16x3(t, k_dim)
    assert hi.dtype == lo.dtype == torch.float16 and inv.dtype == torch.float32
    assert hi.shape == lo.shape == t.shape and hi.stride(k_dim) == 1 and lo.stride(k_dim) == 1
    rows = t.movedim(k_dim, -1)  # (..., R, K)
    assert inv.shape == rows.shape[:-1]
    assert bool(torch.isfinite(hi.float()).all()) and bool(torch.isfinite(lo.float()).all())
    back = (hi.movedim(k_dim, -1).double() + lo.movedim(k_dim, -1).double() / 2048) * inv.double()[..., None]
    largest = rows.double().abs().amax(-1, keepdim=True)
    assert bool(((back - rows.double()).abs() <= largest * 2.0 ** -22).all())
    nonzero = inv[inv != 0]
    assert bool((torch.frexp(nonzero).mantissa == 0.5).all())  # powers of two: every scaling is exact
    assert bool((hi.float().abs().amax(-1 if k_dim == -1 else -2) < 2.0 ** 14).all())
    assert bool((rows.abs().amax(-1)[inv == 0] == 0).all())  # only a row of zeros gets a zero factor
    assert launched == [module._SPLIT_TILES[tiles[case]]]  # the tiles for what is contiguous
