"""Torch-level functions and methods read into the IR compute what PyTorch computes (checked by running the
IR with PyTorch ops: this tests the reading and the decompositions, not the kernels)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from kfoundry.experts.composer.read.lower_fx import ReadFailed
from tests.experts.composer.helpers import assert_ir_matches, read_model


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn
        self.w = nn.Parameter(torch.randn(6, 5))
        self.v = nn.Parameter(torch.randn(5))

    def forward(self, x, y):
        return self.fn(self, x, y)


POINTWISE = {
    "arith": lambda m, x, y: (x + y * 2 - 1.5) / (y.abs() + 1) - 3 * x,
    "rsub_neg_pow": lambda m, x, y: 1.0 - x, "pow": lambda m, x, y: x.abs() ** 1.5 + x ** 2 + 2 ** x + x ** 3,
    "activations": lambda m, x, y: (F.gelu(x) + F.gelu(x, approximate="tanh") + torch.sigmoid(x) + torch.tanh(x)
                                    + F.silu(x) + F.mish(x) + F.softplus(x, beta=2.0) + F.elu(x, 0.5)
                                    + F.celu(x, 1.5) + F.selu(x) + F.leaky_relu(x, 0.05) + F.relu6(x * 4)
                                    + F.hardtanh(x, -0.3, 0.4) + F.hardswish(x) + F.hardsigmoid(x)
                                    + F.logsigmoid(x) + F.softsign(x) + F.threshold(x, 0.1, -2.0)),
    "clamps": lambda m, x, y: torch.clamp(x, min=-0.2) + x.clamp(max=0.3) + torch.clamp(x, y, y + 1)
    + x.clamp_min(0.1) + torch.clip(x, -1, 1),
    "unary": lambda m, x, y: (torch.exp(x) + torch.log(x.abs() + 1) + torch.sqrt(x.abs()) + torch.rsqrt(x.abs() + 1)
                              + x.reciprocal() + torch.erf(x) + torch.floor(x) + torch.ceil(x) + torch.sign(x)
                              + torch.sin(x) + torch.cos(x) + torch.square(x) + torch.log1p(x.abs())
                              + torch.expm1(x) + torch.log2(x.abs() + 1) + torch.trunc(x * 3) + torch.round(x * 3)),
    "compare_where": lambda m, x, y: torch.where(x > y, x, y * 0.5) + (x >= 0).float() + torch.maximum(x, y)
    + torch.minimum(x, 0.2 * y),
    "casts": lambda m, x, y: x.half().float() + (x * 10).long() + x.to(torch.float16).to(x.dtype) + x.type_as(y),
    "addcmul_lerp": lambda m, x, y: torch.addcmul(x, y, x, value=0.5) + torch.lerp(x, y, 0.25),
    "broadcast": lambda m, x, y: x * m.v + m.v[None, :] - y[:, :1],
    "floordiv": lambda m, x, y: torch.div(x * 7, 2, rounding_mode="floor") + x // 0.3 + torch.fmod(x * 5, 2)
    + torch.remainder(x * 5, 2),
}
REDUCTIONS = {
    "sums": lambda m, x, y: (x.sum(), x.sum(dim=1), x.mean(dim=-1, keepdim=True), torch.amax(x, dim=0),
                             x.amin(dim=(0, 1)), x.argmax(dim=1), torch.argmin(x, dim=0, keepdim=True),
                             x.argmax()),
    "max_min": lambda m, x, y: (torch.max(x), torch.max(x, dim=1)[0], x.min(dim=0).indices, torch.max(x, y),
                                x.max(1, keepdim=True).values),
    "var_std": lambda m, x, y: (x.var(dim=1), torch.std(x, dim=0, unbiased=False), x.var(dim=-1, correction=0,
                                                                                       keepdim=True)),
    "softmax": lambda m, x, y: (F.softmax(x, dim=1), torch.log_softmax(x, dim=0), F.softmin(x, dim=-1),
                                x.softmax(-1)),
    "logsumexp_norm": lambda m, x, y: (torch.logsumexp(x, dim=1), torch.norm(x, dim=1), F.normalize(x, dim=1)),
    "losses": lambda m, x, y: (F.mse_loss(x, y), F.l1_loss(x, y, reduction="sum"), F.smooth_l1_loss(x, y, beta=0.5),
                               F.huber_loss(x, y, reduction="none", delta=0.7)),
    "cross_entropy": lambda m, x, y: (F.cross_entropy(x, y.argmax(1)),
                                      F.cross_entropy(x, y.softmax(1), reduction="sum"),
                                      F.nll_loss(x.log_softmax(1), y.argmax(1), reduction="none"),
                                      F.cross_entropy(x, torch.where(y[:, 0] > 0, y.argmax(1), -100))),
    "kl_div": lambda m, x, y: (F.kl_div(x.log_softmax(-1), y.softmax(-1), reduction="batchmean"),
                               F.kl_div(x, y.log_softmax(-1), reduction="sum", log_target=True),
                               F.kl_div(x, torch.relu(y), reduction="mean")),
}
PRODUCTS = {
    "matmul": lambda m, x, y: torch.matmul(x, m.w.t()) + x @ m.w.t(),
    "mm_vector": lambda m, x, y: (torch.mm(x, m.w.t()), torch.matmul(x, m.v), torch.matmul(m.v, m.w.t())),
    "linear_addmm": lambda m, x, y: (F.linear(x, m.w, m.w[:, 0]), torch.addmm(m.w[:, 0], x, m.w.t(), beta=0.5,
                                                                              alpha=2.0)),
}


@pytest.mark.filterwarnings("ignore:reduction. .mean. divides")
@pytest.mark.parametrize("name", sorted(POINTWISE) + sorted(REDUCTIONS) + sorted(PRODUCTS))
def test_function_reads_exactly(name):
    fn = {**POINTWISE, **REDUCTIONS, **PRODUCTS}[name]
    torch.manual_seed(0)
    assert_ir_matches(Fn(fn), [torch.randn(4, 5), torch.randn(4, 5)], atol=1e-4)


def test_scaled_dot_product_attention():
    class M(nn.Module):
        def forward(self, q, k, v, mask):
            return F.scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v, mask, scale=0.3)

    q, k, v = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 6, 4), torch.randn(2, 3, 6, 7)
    assert_ir_matches(M(), [q, k, v, torch.randn(5, 6)], atol=1e-5)


def test_bmm_and_batched_matmul():
    class M(nn.Module):
        def forward(self, a, b):
            return torch.bmm(a, b), torch.matmul(a, b[0])

    assert_ir_matches(M(), [torch.randn(2, 3, 4), torch.randn(2, 4, 5)])


def test_functional_conv_pool_norm():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(6, 2, 3, 3))
            self.wt = nn.Parameter(torch.randn(4, 3, 2, 2))
            self.g = nn.Parameter(torch.rand(4) + 0.5)

        def forward(self, x):
            c = F.conv2d(x, self.w, None, stride=1, padding="same", groups=2)
            t = F.conv_transpose2d(x, self.wt, stride=2)
            p = F.max_pool2d(x, 2), F.avg_pool2d(x, 3, 1, 1, count_include_pad=False)
            a = F.adaptive_avg_pool2d(x, (2, 3)) + F.adaptive_max_pool2d(x, (2, 3))
            g = F.adaptive_avg_pool2d(x, 1)
            n = F.layer_norm(x, (6, 5)) + F.group_norm(x, 2, self.g) + F.instance_norm(x)
            b = F.batch_norm(x, None, None, self.g, None, training=True)
            r = F.rms_norm(x, (5,))
            return c, t, *p, a, g, n, b, r

    assert_ir_matches(M(), [torch.randn(2, 4, 6, 5)], atol=1e-4)


def test_dropout_depends_on_the_mode():
    class M(nn.Module):
        def forward(self, x):
            return F.dropout(x, 0.5, training=self.training) * 2

    assert_ir_matches(M().eval(), [torch.randn(3, 4)])
    with pytest.raises(ReadFailed) as info:
        read_model(M().train(), [torch.randn(3, 4)])
    assert "dropout (training mode)" in info.value.unsupported


class ConstantInForward(nn.Module):
    """torch.tensor(...) of one number built in forward (the cause of `'Model' object has no attribute
    '_tensor_constant0'`: the dispatch-level tracer lifts it onto its own graph module, not the model)."""

    def forward(self, x):
        low = torch.tensor(0.25, device=x.device)
        return torch.clamp(torch.min(x, low), min=-0.5) * torch.tensor(2.0)


@pytest.mark.parametrize("aten", [False, True], ids=["fx", "aten"])
def test_a_one_number_tensor_built_in_forward_is_read_as_the_number(aten):
    assert_ir_matches(ConstantInForward(), [torch.randn(4, 7)], aten=aten)


def test_a_larger_tensor_built_in_forward_is_named_not_a_crash():
    class Table(nn.Module):
        def forward(self, x):
            return x * torch.tensor([1.0, 2.0, 3.0])

    with pytest.raises(ReadFailed) as failed:
        read_model(Table(), [torch.randn(2, 3)])
    assert "torch.tensor" in " ".join(failed.value.unsupported)


@pytest.mark.parametrize("aten", [False, True], ids=["fx", "aten"])
def test_triangles_are_read_as_a_mask_of_row_and_column_indices(aten):
    class Triangles(nn.Module):
        def forward(self, x):
            return torch.triu(x) + torch.tril(x, diagonal=-1) * 2 + torch.triu(x, 2).tril(3)

    assert_ir_matches(Triangles(), [torch.randn(3, 5, 7)], aten=aten)


@pytest.mark.parametrize("aten", [False, True], ids=["fx", "aten"])
def test_scans_are_read_along_their_dim(aten):
    class Scans(nn.Module):
        def forward(self, x, y):
            return torch.cumsum(x * (y > 0), dim=-1), x.cumprod(0), torch.cumsum((y > 0).int(), 1)

    assert_ir_matches(Scans(), [torch.rand(3, 5, 4) + 0.5, torch.randn(3, 5, 4)], aten=aten)
