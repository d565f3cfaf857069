"""Composite ops written as primitives give PyTorch's results (run with PyTorch ops)."""

import torch
import torch.nn.functional as F

from kfoundry.experts.composer.ir.builder import GraphBuilder
from kfoundry.experts.composer.read import decompose
from tests.experts.composer.helpers import run_ir


def _run(build, *tensors):
    b = GraphBuilder()
    values = [b.input(f"t{i}", i, t) for i, t in enumerate(tensors)]
    outs = build(b, *values)
    b.graph.outputs = list(outs) if isinstance(outs, tuple) else [outs]
    return run_ir(b.graph, dict(zip(values, tensors)))


def test_linear_and_matmul_with_vectors():
    x, w, bias, v = torch.randn(3, 4, 5), torch.randn(6, 5), torch.randn(6), torch.randn(5)
    out = _run(lambda b, x, w, bias, v: (decompose.linear(b, x, w, bias), decompose.linear(b, x, w, None),
                                         decompose.matmul(b, x, v)),
               x, w, bias, v)
    torch.testing.assert_close(out[0], F.linear(x, w, bias))
    torch.testing.assert_close(out[1], F.linear(x, w))
    torch.testing.assert_close(out[2], torch.matmul(x, v))


def test_vector_times_matrix():
    v, m = torch.randn(5), torch.randn(5, 3)
    (out,) = _run(lambda b, v, m: decompose.matmul(b, v, m), v, m)
    torch.testing.assert_close(out, v @ m)


def test_softmax_family_is_stable_for_large_values():
    x = torch.randn(4, 7) * 50
    soft, logsoft, lse, lse_keep = _run(lambda b, x: (decompose.softmax(b, x, 1), decompose.softmax(b, x, 0, log=True),
                                                      decompose.logsumexp(b, x, (1,), False),
                                                      decompose.logsumexp(b, x, (0, 1), True)), x)
    torch.testing.assert_close(soft, torch.softmax(x, 1))
    torch.testing.assert_close(logsoft, torch.log_softmax(x, 0))
    torch.testing.assert_close(lse, torch.logsumexp(x, 1))
    torch.testing.assert_close(lse_keep, torch.logsumexp(x, (0, 1), keepdim=True))


def test_variance_norm_normalize_losses_addcmul():
    x, y = torch.randn(5, 6) + 3, torch.randn(5, 6)
    outs = _run(lambda b, x, y: (decompose.variance(b, x, (1,), 1, False), decompose.variance(b, x, None, 0, True),
                                 decompose.vector_norm(b, x, (0,), False), decompose.normalize(b, x, 1, 1e-12),
                                 decompose.reduce_loss(b, b.op("abs", [b.op("sub", [x, y])]), "mean"),
                                 decompose.addcmul(b, x, x, y, 0.5), decompose.addcmul(b, x, x, y, 2.0, div=True)),
                x, y)
    torch.testing.assert_close(outs[0], x.var(1))
    torch.testing.assert_close(outs[1], x.var(None, correction=0, keepdim=True).reshape(1, 1))
    torch.testing.assert_close(outs[2], torch.linalg.vector_norm(x, dim=0))
    torch.testing.assert_close(outs[3], F.normalize(x, dim=1))
    torch.testing.assert_close(outs[4], F.l1_loss(x, y))
    torch.testing.assert_close(outs[5], torch.addcmul(x, x, y, value=0.5))
    torch.testing.assert_close(outs[6], torch.addcdiv(x, x, y, value=2.0))
    assert decompose.count((2, 3, 4), (0, 2)) == 8
