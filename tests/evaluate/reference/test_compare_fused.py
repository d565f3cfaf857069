"""The one-pass comparison kernel (through Triton's interpreter here) gives the PyTorch passes' figures."""

import math

import pytest
import torch

from kfoundry.evaluate.reference import compare_fused
from kfoundry.evaluate.reference.compare import _compare_fused, compare_tensor

ATOL = 1e-4


def _pair(n: int, seed: int = 0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    truth = torch.randn(n, generator=g, dtype=torch.float64)
    return truth.to(dtype), truth


def _same(a, b):
    for name in ("passed", "max_abs_error", "max_rel_error", "mismatch_fraction", "first_bad_index",
                 "error_ratio_candidate", "error_ratio_reference", "message"):
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, float) and isinstance(y, float):
            assert math.isclose(x, y, rel_tol=1e-12, abs_tol=0.0), name
        else:
            assert x == y, name


@pytest.mark.parametrize("case", ["equal", "one_off", "rescued_by_truth", "no_truth", "bf16", "transposed"])
def test_figures_match_the_pytorch_passes(case):
    n = 3 * compare_fused.BLOCK + 123  # several blocks, the last one partial
    r, t = _pair(n)
    c = r.clone()
    if case == "one_off":
        c[5000] += 0.5
        c[9000] -= 0.25
    if case == "rescued_by_truth":  # the reference is the one that is off; the candidate is exact
        c = t.float()
        r = r.clone()
        r[7] += 1e-3
    if case == "no_truth":
        c[100] += 1.0
        t = None
    if case == "bf16":
        r, c, t = r.bfloat16(), (c + 1e-3).bfloat16(), t
    if case == "transposed":
        r2 = r[: 96 * 128].reshape(96, 128)
        r, t = r2.t(), t[: 96 * 128].reshape(96, 128).t()
        c = r.contiguous()
        c[3, 4] += 1.0
    fused = _compare_fused(c, r, t, ATOL, ATOL)
    assert fused is not None
    _same(fused, compare_tensor(c, r, t, ATOL, ATOL))
    if case == "one_off":
        assert not fused.passed and fused.first_bad_index == [5000]
        assert fused.mismatch_fraction == pytest.approx(2 / n)
    if case == "rescued_by_truth":
        assert fused.passed and "float64 truth" in fused.message


def test_non_finite_values_are_left_to_the_pytorch_path():
    r, t = _pair(5000)
    c = r.clone()
    c[17] = float("nan")
    figures = compare_fused.fused_figures(c, r, t, ATOL, ATOL)
    assert figures.nonfinite == 1
    assert _compare_fused(c, r, t, ATOL, ATOL) is None
    assert "NaN/Inf" in compare_tensor(c, r, t, ATOL, ATOL).message


def test_usable_only_for_float_tensors_of_one_shape():
    r, t = _pair(10)
    assert compare_fused.usable(r, r.clone(), t)
    assert not compare_fused.usable(r.long(), r.long(), None)
    assert not compare_fused.usable(r, r[:5], None)
    assert not compare_fused.usable(r, r.clone(), t.float())


@pytest.mark.parametrize("case", ["equal", "one_off", "rescued_by_truth", "bf16", "transposed"])
def test_a_truth_held_as_a_correction_gives_the_same_figures_on_both_paths(case):
    from kfoundry.evaluate.reference.truth import compact

    n = 3 * compare_fused.BLOCK + 123
    r, t = _pair(n)
    c = r.clone()
    if case == "one_off":
        c[5000] += 0.5
    if case == "rescued_by_truth":
        c, r = t.float(), r.clone()
        r[7] += 1e-3
    if case == "bf16":
        r, c = r.bfloat16(), (c + 1e-3).bfloat16()
    if case == "transposed":
        r, t = r[: 96 * 128].reshape(96, 128).t(), t[: 96 * 128].reshape(96, 128).t()
        c = r.contiguous()
        c[3, 4] += 1.0
    [held] = compact([r], [t])
    assert compare_fused.usable(c, r, held)
    fused = _compare_fused(c, r, held, ATOL, ATOL)
    assert fused is not None
    _same(fused, compare_tensor(c, r, held, ATOL, ATOL))
    exact = compare_tensor(c, r, t, ATOL, ATOL)
    assert (fused.passed, fused.first_bad_index) == (exact.passed, exact.first_bad_index)
    assert abs(fused.error_ratio_candidate - exact.error_ratio_candidate) <= 2.0 ** -23 * exact.error_ratio_reference
