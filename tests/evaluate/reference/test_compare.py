"""kfoundry.evaluate.reference.compare on hand-made tensors: allclose, the float64 arbiter, NaN, shapes, dtypes,
integers, index outputs (near-ties) and several outputs."""

import math

import pytest
import torch

from kfoundry.evaluate.reference.compare import (IndexSource, compare_outputs, compare_tensor, compare_value, error_ratio,
                                                 flatten_outputs)

TOL = 1e-4


def test_allclose_passes_without_a_message():
    r = torch.tensor([1.0, -2.0, 3.0])
    c = r + torch.tensor([5e-5, -5e-5, 0.0])
    result = compare_tensor(c, r, None, TOL, TOL)
    assert result.passed
    assert result.message == ""
    assert result.max_abs_error == pytest.approx(5e-5, rel=1e-2)
    assert result.mismatch_fraction == 0.0


def test_values_off_fail_with_numeric_evidence():
    r = torch.zeros(2, 3)
    c = r.clone()
    c[1, 2] = 0.5
    result = compare_tensor(c, r, None, TOL, TOL)
    assert not result.passed
    assert result.first_bad_index == [1, 2]
    assert result.max_abs_error == pytest.approx(0.5)
    assert result.mismatch_fraction == pytest.approx(1 / 6)
    assert "max abs error 0.5" in result.message
    assert "first at [1, 2]" in result.message


def test_arbiter_passes_a_candidate_closer_to_the_truth_than_the_reference():
    truth = torch.tensor([1.0, 2.0], dtype=torch.float64)
    r = torch.tensor([1.0 + 5e-4, 2.0])  # the reference itself is 5e-4 off (e(r) = 2.5)
    c = torch.tensor([1.0, 2.0])  # exact
    assert not torch.allclose(c, r, atol=TOL, rtol=TOL)
    result = compare_tensor(c, r, truth, TOL, TOL)
    assert result.passed
    assert result.error_ratio_reference == pytest.approx(2.5, rel=1e-2)
    assert result.error_ratio_candidate == pytest.approx(0.0, abs=1e-3)
    assert "as close to the float64 truth" in result.message


def test_arbiter_allows_up_to_twice_the_reference_error():
    truth = torch.tensor([1.0], dtype=torch.float64)
    r = torch.tensor([1.0 + 5e-4])  # e(r) = 5e-4 / 2e-4 = 2.5
    inside = torch.tensor([1.0 - 9e-4])  # e(c) = 4.5 <= 5
    outside = torch.tensor([1.0 - 1.2e-3])  # e(c) = 6 > 5
    assert compare_tensor(inside, r, truth, TOL, TOL).passed
    result = compare_tensor(outside, r, truth, TOL, TOL)
    assert not result.passed
    assert result.error_ratio_candidate == pytest.approx(6.0, rel=1e-2)
    assert "e(candidate)=6" in result.message and "e(reference)=2.5" in result.message


def test_arbiter_limit_is_at_least_one_tolerance_unit():
    # the reference is only 0.3 units from the truth (2 e(r) = 0.6), yet a candidate 0.9 units from
    # the truth on the other side, outside allclose of the reference, passes: the limit is max(1, 2 e(r))
    truth = torch.tensor([1.0], dtype=torch.float64)
    r = torch.tensor([1.0 - 0.6e-4])
    c = torch.tensor([1.0 + 1.8e-4])
    assert not torch.allclose(c, r, atol=TOL, rtol=TOL)
    result = compare_tensor(c, r, truth, TOL, TOL)
    assert result.passed
    assert result.error_ratio_candidate == pytest.approx(0.9, rel=1e-2)
    assert result.error_ratio_reference == pytest.approx(0.3, rel=1e-2)
    c = torch.tensor([1.0 + 2.4e-4])  # e(c) = 1.2 > max(1, 0.6)
    assert not compare_tensor(c, r, truth, TOL, TOL).passed


def test_error_ratio_counts_matching_nan_and_inf_as_agreement():
    truth = torch.tensor([float("nan"), float("inf"), 1.0], dtype=torch.float64)
    x = torch.tensor([float("nan"), float("inf"), 1.0], dtype=torch.float64)
    assert error_ratio(x, truth, TOL, TOL) == 0.0
    x = torch.tensor([0.0, float("inf"), 1.0], dtype=torch.float64)
    assert error_ratio(x, truth, TOL, TOL) == math.inf


def test_nan_where_the_reference_is_finite_fails():
    r = torch.tensor([1.0, 2.0, 3.0])
    c = torch.tensor([1.0, float("nan"), 3.0])
    truth = r.double()
    result = compare_tensor(c, r, truth, TOL, TOL)
    assert not result.passed
    assert "NaN/Inf where the reference is finite: 1 element(s), first at [1]" in result.message
    assert result.first_bad_index == [1]


def test_inf_where_the_reference_is_finite_fails():
    r = torch.tensor([1.0, 2.0])
    c = torch.tensor([1.0, float("inf")])
    result = compare_tensor(c, r, None, TOL, TOL)
    assert not result.passed
    assert "NaN/Inf where the reference is finite" in result.message


def test_nan_where_the_reference_is_nan_passes():
    r = torch.tensor([float("nan"), 2.0])
    c = torch.tensor([float("nan"), 2.0])
    assert compare_tensor(c, r, None, TOL, TOL).passed


def test_shape_mismatch_fails():
    r = torch.zeros(4, 250)
    result = compare_tensor(r.t(), r, None, TOL, TOL)
    assert not result.passed
    assert result.message == "shape (250, 4) but the reference's is (4, 250)"
    flat = compare_tensor(r.flatten(), r, None, TOL, TOL)
    assert not flat.passed and "shape (1000,)" in flat.message


def test_dtype_mismatch_fails():
    r = torch.zeros(3)
    result = compare_tensor(r.double(), r, None, TOL, TOL)
    assert not result.passed
    assert result.message == "dtype torch.float64 but the reference's is torch.float32"


def test_integer_outputs_are_compared_exactly():
    r = torch.tensor([[1, 2], [3, 4]])
    assert compare_tensor(r.clone(), r, None, TOL, TOL).passed
    c = r.clone()
    c[1, 0] = 5
    result = compare_tensor(c, r, None, 10.0, 10.0)  # a tolerance does not apply to integers
    assert not result.passed
    assert "exact comparison" in result.message
    assert "first at [1, 0] (5 vs 3)" in result.message
    assert result.mismatch_fraction == pytest.approx(0.25)


def test_bool_outputs_are_compared_exactly():
    r = torch.tensor([True, False])
    assert compare_tensor(r.clone(), r, None, TOL, TOL).passed
    assert not compare_tensor(~r, r, None, TOL, TOL).passed


def test_complex_outputs_compare_real_and_imaginary_parts():
    r = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64)
    assert compare_tensor(r.clone(), r, None, TOL, TOL).passed
    c = r.clone()
    c[1] = 3 - 1.5j
    assert not compare_tensor(c, r, None, TOL, TOL).passed


# -- index outputs (argmax / argmin): near-ties ---------------------------------------------------

def _argmax_source():
    values = torch.tensor([[1.0, 3.0, 3.0, 0.5],  # two equal maxima: index 1 or 2
                           [0.0, -1.0, 2.0, 1.0]])
    return values, IndexSource(values=values, dim=1, keepdim=False)


def test_argmax_near_tie_other_index_passes():
    values, source = _argmax_source()
    r = torch.tensor([1, 2])
    c = torch.tensor([2, 2])  # the other maximum of row 0
    assert not torch.equal(c, r)
    result = compare_tensor(c, r, None, TOL, TOL, index_source=source)
    assert result.passed
    assert "50.00% of indices differ, all at near-ties" in result.message
    comparison = compare_outputs(c, r, None, TOL, TOL, {0: source})
    assert comparison.passed


def test_argmax_wrong_index_with_a_smaller_value_fails():
    values, source = _argmax_source()
    r = torch.tensor([1, 2])
    c = torch.tensor([0, 2])  # row 0: value 1.0 where the maximum is 3.0
    result = compare_tensor(c, r, None, TOL, TOL, index_source=source)
    assert not result.passed
    assert "index output points at values that differ" in result.message
    assert result.first_bad_index == [0]
    assert result.max_abs_error == pytest.approx(2.0)


def test_argmax_index_out_of_range_fails():
    values, source = _argmax_source()
    result = compare_tensor(torch.tensor([7, 2]), torch.tensor([1, 2]), None, TOL, TOL, index_source=source)
    assert not result.passed
    assert "outside [0, 4)" in result.message


def test_argmax_with_keepdim_and_flattened():
    values, _ = _argmax_source()
    keep = IndexSource(values=values, dim=1, keepdim=True)
    assert compare_tensor(torch.tensor([[2], [2]]), torch.tensor([[1], [2]]), None, TOL, TOL, keep).passed
    flat = IndexSource(values=values, dim=None, keepdim=False)
    assert compare_tensor(torch.tensor(2), torch.tensor(1), None, TOL, TOL, flat).passed
    assert not compare_tensor(torch.tensor(6), torch.tensor(1), None, TOL, TOL, flat).passed


# -- several outputs, non-tensor outputs ----------------------------------------------------------

def test_tuple_outputs_all_equal_pass():
    a, b = torch.ones(3), torch.arange(4)
    comparison = compare_outputs((a, b), (a.clone(), b.clone()), None, TOL, TOL)
    assert comparison.passed
    assert comparison.message == ""
    assert len(comparison.outputs) == 2


def test_tuple_outputs_name_the_failing_one():
    a, b = torch.ones(3), torch.zeros(2)
    comparison = compare_outputs((a, b + 1.0), (a, b), None, TOL, TOL)
    assert not comparison.passed
    assert comparison.failed_output == 1
    assert comparison.message.startswith("output 1: values off")
    assert comparison.worst("max_abs_error") == pytest.approx(1.0)


def test_wrong_number_of_outputs_fails():
    a = torch.ones(3)
    comparison = compare_outputs((a, a), a, None, TOL, TOL)
    assert not comparison.passed
    assert comparison.message == "forward returned 2 output(s) but the reference returns 1"
    comparison = compare_outputs([a], (a, a), None, TOL, TOL)
    assert "returned 1 output(s) but the reference returns 2" in comparison.message


def test_non_tensor_where_a_tensor_is_expected_fails():
    comparison = compare_outputs(3.0, torch.ones(2), None, TOL, TOL)
    assert not comparison.passed
    assert comparison.message == "float where the reference returns tensor (2,) float32"


def test_truth_with_another_structure_is_ignored():
    r = torch.tensor([1.0 + 5e-4])
    c = torch.tensor([1.0])
    # a truth with a different number of leaves cannot arbitrate: plain allclose decides
    comparison = compare_outputs(c, r, (torch.tensor([1.0]).double(), torch.ones(1)), TOL, TOL)
    assert not comparison.passed


def test_nested_and_dict_outputs_are_flattened_in_order():
    a, b, c = torch.ones(1), torch.zeros(1), torch.full((1,), 2.0)
    assert flatten_outputs((a, [b, {"z": c, "a": 4}])) == [a, b, 4, c]


def test_compare_value():
    assert compare_value(1.00001, 1.0, TOL, TOL).passed
    assert not compare_value(1.1, 1.0, TOL, TOL).passed
    assert compare_value(float("nan"), float("nan"), TOL, TOL).passed
    assert compare_value(3, 3, TOL, TOL).passed
    result = compare_value("3", 3, TOL, TOL)
    assert not result.passed and result.message == "value '3' but the reference's is 3"


def test_a_device_for_the_arithmetic_gives_the_same_figures():
    """Evaluator.compare runs the comparison on its GPU; the verdict and every figure must not
    depend on where the arithmetic ran (here the only device there is: the CPU, named)."""
    torch.manual_seed(0)
    ref = torch.randn(64, 33)
    truth = ref.double() + 1e-7 * torch.randn(64, 33, dtype=torch.float64)
    cand = ref + 3e-4 * torch.randn(64, 33)
    values = torch.randn(64, 10)
    index = values.argmax(dim=1)
    sources = {1: IndexSource(values, 1, False)}
    plain = compare_outputs((cand, index), (ref, index), (truth, index), 1e-4, 1e-4, sources)
    named = compare_outputs((cand, index), (ref, index), (truth, index), 1e-4, 1e-4, sources, device="cpu")
    assert (plain.passed, plain.message, plain.failed_output) == (named.passed, named.message, named.failed_output)
    assert plain.outputs == named.outputs and not plain.passed


def test_chunked_figures_are_those_of_one_pass(monkeypatch):
    """Large outputs are compared a chunk at a time: maxima, counts and first positions merge exactly."""
    from kfoundry.evaluate.reference import compare as module

    g = torch.Generator().manual_seed(3)
    truth = torch.randn(64, 97, generator=g, dtype=torch.float64)
    reference = truth.float()
    cases = {"close": reference + 1e-6, "off": reference.clone(), "nan": reference.clone()}
    cases["off"][40, 3] += 0.5
    cases["off"][60, 90] -= 0.5
    cases["nan"][50, 7] = float("nan")
    cases["nan"][10, 1] += 1.0
    for name, candidate in cases.items():
        whole = module.compare_tensor(candidate, reference, truth, 1e-4, 1e-4)
        monkeypatch.setattr(module, "CHUNK", 1000)  # 7 chunks, the last one partial
        chunked = module.compare_tensor(candidate, reference, truth, 1e-4, 1e-4)
        monkeypatch.setattr(module, "CHUNK", 1 << 25)
        assert chunked == whole, name
    assert "NaN/Inf" in module.compare_tensor(cases["nan"], reference, truth, 1e-4, 1e-4).message
    assert module.compare_tensor(cases["off"], reference, truth, 1e-4, 1e-4).first_bad_index == [40, 3]
