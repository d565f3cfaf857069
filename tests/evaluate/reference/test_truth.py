"""The truth held as a float32 correction: read back within 2^-24 |t - r| of the float64 truth."""

import pytest
import torch

from kfoundry.evaluate.reference import truth as truths
from kfoundry.evaluate.reference.compare import compare_outputs, compare_tensor
from kfoundry.evaluate.reference.truth import Correction

ATOL = 1e-4


def _reference_and_truth(n: int = 10_000, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(n, generator=g, dtype=torch.float64) * 100
    r = (t + torch.randn(n, generator=g, dtype=torch.float64) * 1e-3).float()  # a reference off by ~1e-3
    return r, t


def test_a_float_truth_is_read_back_within_the_bound():
    r, t = _reference_and_truth()
    [held] = truths.compact([r], [t])
    assert isinstance(held, Correction) and held.correction.dtype == torch.float32
    back = held.full(r)
    assert back.dtype == torch.float64 and back.shape == t.shape
    bound = (t - r.double()).abs() * 2.0 ** -24 + t.abs() * 2.0 ** -52
    assert bool(((back - t).abs() <= bound).all())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_16_and_32_bit_outputs_are_compacted_in_chunks(monkeypatch, dtype):
    monkeypatch.setattr(truths, "CHUNK", 1000)  # several chunks, the last one partial
    r, t = _reference_and_truth(4321)
    r = r.to(dtype).reshape(29, 149).t()  # not contiguous: corrections follow the logical order
    t = t.reshape(29, 149).t()
    [held] = truths.compact([r], [t])
    assert isinstance(held, Correction) and held.shape == r.shape and held.correction.is_contiguous()
    assert torch.allclose(held.full(r), t, rtol=1e-6, atol=0)


def test_what_cannot_be_compacted_keeps_its_float64_truth():
    r, t = _reference_and_truth(100)
    bad = t.clone()
    bad[3] = float("inf")
    nan_ref = r.clone()
    nan_ref[4] = float("nan")
    ints = torch.arange(5)
    wide = torch.tensor([3e38], dtype=torch.float32)  # truth - reference beyond float32
    kept = truths.compact([r, nan_ref, ints, r.double(), wide, 1.5],
                          [bad, t, ints, t, torch.tensor([-3e38], dtype=torch.float64), 1.5])
    assert kept[0] is bad and kept[1] is t and kept[2] is ints and kept[3] is t and kept[5] == 1.5
    assert kept[4].dtype == torch.float64
    assert truths.compact([r], [t, t]) == [t, t]  # leaves that do not pair up are left as they are


def test_held_bytes_follow_the_dtype():
    assert truths.held_bytes(torch.empty(10, device="meta")) == 40
    assert truths.held_bytes(torch.empty(10, dtype=torch.float16, device="meta")) == 40
    assert truths.held_bytes(torch.empty(10, dtype=torch.float64, device="meta")) == 80
    assert truths.held_bytes(torch.empty(10, dtype=torch.int64, device="meta")) == 80


def test_comparisons_with_the_correction_give_the_float64_truths_verdicts():
    r, t = _reference_and_truth()
    [held] = truths.compact([r], [t])
    exact = t.float()  # off from the reference by ~1e-3, as close to the truth as float32 allows
    wrong = exact.clone()
    wrong[77] += 1.0
    for c in (exact, wrong, r.clone()):
        a, b = compare_tensor(c, r, t, ATOL, ATOL), compare_tensor(c, r, held, ATOL, ATOL)
        assert (a.passed, a.first_bad_index, a.max_abs_error, a.mismatch_fraction) == \
               (b.passed, b.first_bad_index, b.max_abs_error, b.mismatch_fraction)
        # the truth read back is within 2^-24 |t - r| of it: e moves by at most 2^-24 e(r) (and roundings)
        shift = 2.0 ** -23 * a.error_ratio_reference
        assert abs(b.error_ratio_candidate - a.error_ratio_candidate) <= shift
        assert abs(b.error_ratio_reference - a.error_ratio_reference) <= shift
    assert compare_tensor(exact, r, held, ATOL, ATOL).passed  # the truth rescues the exact kernel
    assert not compare_tensor(wrong, r, held, ATOL, ATOL).passed
    # through compare_outputs, with the truth's leaves as the judge keeps them
    assert compare_outputs([exact], [r], [held], ATOL, ATOL).passed
