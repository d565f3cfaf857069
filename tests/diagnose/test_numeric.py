"""kfoundry.diagnose.numeric on outputs made the way buggy kernels make them: each pattern named with
its numbers, and no pattern where the data do not support one (noise, a correct output)."""

import json

import pytest
import torch

from kfoundry.diagnose.numeric import error_pattern, nondeterminism, pattern_findings, race_findings

TOL = 1e-4


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen(seed))


def _patterns(candidate, reference, truth=None, atol=TOL, rtol=TOL) -> tuple[dict, dict[str, dict]]:
    result = error_pattern(candidate, reference, atol, rtol, truth)
    json.dumps(result, allow_nan=False)  # plain JSON, no NaN/Inf
    return result, {p["kind"]: p for p in result["patterns"]}


def _kinds(result: dict) -> list[str]:
    return [p["kind"] for p in result["patterns"]]


def _tf32(x: torch.Tensor) -> torch.Tensor:
    """x with the low 13 mantissa bits zeroed: what a TF32 tensor core reads."""
    return (x.view(torch.int32) & ~0x1FFF).view(torch.float32)


# --- location patterns -------------------------------------------------------------------------


def test_nan_tail_of_a_floor_division_grid():
    x = _randn(1000)
    reference = x * 2 + 0.5
    candidate = reference.clone()
    candidate[768:] = float("nan")  # grid = 1000 // 256 programs: the last 232 never written
    result, found = _patterns(candidate, reference)
    assert result["shape"] == [1000] and result["dtype"] == "float32" and result["mismatch"] is None
    assert result["stats"]["count_off"] == 232 and result["stats"]["nonfinite_count"] == 232
    assert result["stats"]["fraction_off"] == pytest.approx(0.232)
    nan = found["nonfinite"]["data"]
    assert (nan["count"], nan["nan_count"], nan["first_index"]) == (232, 232, [768])
    assert nan["contiguous"] and nan["reaches_end"] and nan["block_boundary"] == 256
    tail = found["tail"]["data"]
    assert (tail["dim"], tail["start"], tail["size"], tail["count"]) == (0, 768, 1000, 232)
    assert tail["grid_floor_block"] == 256 and tail["coverage"] == 1.0
    assert "1000 // 256" in found["tail"]["description"]
    assert found["untouched"]["data"]["fill"] == "nan"
    assert _kinds(result).index("tail") < _kinds(result).index("untouched")
    assert not {"periodic", "slices", "everywhere", "scattered"} & set(found)


def test_zero_tail_of_the_last_dim_in_a_zero_initialised_output():
    reference = _randn(64, 1000)
    candidate = reference.clone()
    candidate[:, 768:] = 0.0  # torch.zeros output, the column grid misses the last partial block
    _, found = _patterns(candidate, reference)
    tail = found["tail"]["data"]
    assert (tail["dim"], tail["start"], tail["count"], tail["grid_floor_block"]) == (1, 768, 232, 256)
    assert found["zeros"]["data"]["fraction"] == 1.0
    assert "nonfinite" not in found and "slices" not in found and "periodic" not in found


def test_tail_of_the_flattened_index():
    reference = _randn(100, 1000)
    candidate = reference.clone()
    candidate.view(-1)[99328:] = float("nan")  # a 1-D grid of 100000 // 1024 programs
    _, found = _patterns(candidate, reference)
    tail = found["tail"]["data"]
    assert tail["dim"] is None and tail["start"] == 99328 and tail["size"] == 100000
    assert tail["grid_floor_block"] == 1024 and tail["start_index"] == [99, 328]
    assert found["nonfinite"]["data"]["rows"] == 1 and found["nonfinite"]["data"]["first_rows"] == [99]


def test_one_wrong_channel_of_a_3d_output():
    reference = _randn(4, 8, 32)
    candidate = reference.clone()
    candidate[:, 5, :] = _randn(4, 32, seed=1)  # channel 5 read the wrong weights
    _, found = _patterns(candidate, reference)
    slices = found["slices"]["data"]
    assert (slices["dim"], slices["size"], slices["count"], slices["indices"]) == (1, 8, 1, [5])
    assert slices["density"] == 1.0
    assert not {"tail", "periodic", "offset-along-dim", "scale-along-dim", "everywhere"} & set(found)


def test_last_element_of_every_64_block():
    reference = _randn(32, 256)
    candidate = reference.clone()
    candidate.view(-1)[63::64] += 1.0  # an off-by-one at the block edge
    result, found = _patterns(candidate, reference)
    periodic = found["periodic"]["data"]
    assert (periodic["dim"], periodic["period"], periodic["positions"]) == (1, 64, [63])
    assert periodic["density"] == 1.0 and periodic["confinement"] == 1.0
    assert "last element" in found["periodic"]["description"]
    assert result["patterns"][0]["kind"] == "periodic"
    assert "slices" not in found and "tail" not in found


def test_every_other_block_of_the_flattened_index():
    reference = _randn(100 * 97)  # 9700: blocks of 128 do not line up with anything
    candidate = reference.clone()
    index = torch.arange(candidate.numel())
    candidate[(index // 128) % 2 == 1] = 0.0  # odd programs never store
    _, found = _patterns(candidate, reference)
    periodic = found["periodic"]["data"]
    assert periodic["dim"] is None and periodic["period"] == 256
    assert periodic["positions"] == list(range(128, 256))
    assert "every other block of 128" in found["periodic"]["description"]
    assert "zeros" in found and "tail" not in found


def test_every_other_row_is_periodic_not_a_tail():
    reference = _randn(64, 128)
    candidate = reference.clone()
    candidate[1::2] = 0.0
    _, found = _patterns(candidate, reference)
    assert found["periodic"]["data"]["dim"] == 0 and found["periodic"]["data"]["positions"] == [1]
    assert "tail" not in found


def test_a_wrong_tile():
    reference = _randn(128, 128)
    candidate = reference.clone()
    candidate[96:, 96:] = _randn(32, 32, seed=3)  # the last program of a 32x32 tiling
    _, found = _patterns(candidate, reference)
    tile = found["tile"]["data"]
    assert tile["box"] == [[96, 128], [96, 128]] and tile["volume"] == 1024 and tile["density"] == 1.0
    assert tile["starts_multiple_of"] == [32, 32]
    assert "tail" not in found  # not confined to the tail of either dim alone


def test_tail_along_dim_3_of_a_5d_output():
    reference = _randn(2, 3, 4, 40, 6)
    candidate = reference.clone()
    candidate[:, :, :, 32:, :] = float("nan")
    _, found = _patterns(candidate, reference)
    tail = found["tail"]["data"]
    assert (tail["dim"], tail["start"], tail["size"]) == (3, 32, 40)


# --- algebraic patterns ------------------------------------------------------------------------


def test_missing_softmax_scale_is_a_named_factor():
    reference = _randn(64, 128)
    result, found = _patterns(reference * 0.125, reference)
    assert _kinds(result) == ["scale"]
    data = found["scale"]["data"]
    assert data["factor"] == pytest.approx(0.125) and data["named"] == "1/8" and data["scope"] == "everywhere"


def test_a_factor_applied_before_a_correct_bias_is_a_scale_about_the_bias():
    x = _randn(4, 250)
    reference = x * 2.0 + 0.5
    result, found = _patterns(x * (2.0 * 1.001) + 0.5, reference)  # the kernel's scale is 0.1% off
    assert _kinds(result) == ["scale"]
    data = found["scale"]["data"]
    assert data["factor"] == pytest.approx(1.001, rel=1e-5) and data["pivot"] == pytest.approx(0.5, rel=1e-3)
    assert "1.001" in pattern_findings(result)[1].title


def test_flipped_sign():
    reference = _randn(500)
    _, found = _patterns(-reference, reference)
    assert found["scale"]["data"]["factor"] == pytest.approx(-1.0) and found["scale"]["data"]["named"] == "-1"


def test_constant_offset():
    reference = _randn(64, 128)
    result, found = _patterns(reference + 0.3, reference)
    assert _kinds(result) == ["offset"]
    assert found["offset"]["data"]["offset"] == pytest.approx(0.3) and found["offset"]["data"]["scope"] == "everywhere"


def test_missing_per_channel_bias():
    conv = _randn(2, 16, 8, 8)
    bias = _randn(16, seed=1)
    reference = conv + bias.view(1, -1, 1, 1)
    _, found = _patterns(conv, reference)  # the kernel forgot the bias
    data = found["offset-along-dim"]["data"]
    assert data["dim"] == 1 and data["size"] == 16 and data["differing_count"] == 16
    assert data["profile"] == pytest.approx((-bias[:8]).tolist(), rel=1e-4, abs=1e-5)
    assert not {"scale", "offset", "slices", "everywhere"} & set(found)


def test_softmax_normalised_by_part_of_the_row_is_a_per_row_factor():
    x = _randn(32, 300)
    e = (x - x.max(dim=1, keepdim=True).values).exp()
    partial = e[:, :256].sum(dim=1, keepdim=True)  # the row sum covered only the first block
    result, found = _patterns(e / partial, torch.softmax(x, dim=1))
    data = found["scale-along-dim"]["data"]
    assert data["dim"] == 0 and data["size"] == 32 and data["differing_count"] == 32
    expected = (e.sum(dim=1) / partial.squeeze(1))[:8]
    assert data["profile"] == pytest.approx(expected.tolist(), rel=1e-4)
    assert _kinds(result) == ["scale-along-dim"]


def test_scale_and_offset_are_not_claimed_for_unrelated_values():
    reference = _randn(64, 128)
    result, found = _patterns(_randn(64, 128, seed=9), reference)
    assert _kinds(result) == ["everywhere"]
    assert abs(found["everywhere"]["data"]["correlation"]) < 0.1
    assert "unrelated to the reference" in found["everywhere"]["description"]


# --- layout patterns ---------------------------------------------------------------------------


def test_square_transpose():
    reference = _randn(64, 64)
    result, found = _patterns(reference.t().contiguous(), reference)
    data = found["transposed"]["data"]
    assert data["dims"] == [0, 1] and data["square"] is True and data["still_off"] == 0
    assert result["patterns"][0]["kind"] == "transposed"


def test_non_square_flat_transpose():
    reference = _randn(48, 80)
    candidate = reference.t().contiguous().view(48, 80)  # the store used the strides of an (80, 48) layout
    _, found = _patterns(candidate, reference)
    data = found["transposed"]["data"]
    assert data["square"] is False and data["permuted_shape"] == [80, 48] and data["dims"] == [0, 1]


def test_channels_last_write_of_a_4d_output():
    reference = _randn(2, 3, 5, 7)
    candidate = reference.permute(0, 2, 3, 1).contiguous().view(2, 3, 5, 7)
    _, found = _patterns(candidate, reference)
    assert found["transposed"]["data"]["permutation"] == [0, 2, 3, 1]


# --- precision ---------------------------------------------------------------------------------


def _matmuls():
    a, b = _randn(128, 256), _randn(256, 96, seed=1)
    return a @ b, _tf32(a) @ _tf32(b), a.double() @ b.double()


def test_tf32_inputs_are_reduced_precision_confirmed_by_the_truth():
    exact, tf32, truth = _matmuls()
    result, found = _patterns(tf32, exact, truth)
    assert _kinds(result) == ["reduced-precision"]
    data = found["reduced-precision"]["data"]
    assert data["consistent_with"].startswith("TF32")
    assert 2e-4 < data["relative_rms_error"] < 1.5e-3
    assert data["candidate_rms_vs_truth"] > 100 * data["reference_rms_vs_truth"]
    truth_stats = result["stats"]["truth"]
    assert truth_stats["candidate_error_ratio"] > 10 * truth_stats["reference_error_ratio"]
    findings = pattern_findings(result)
    precision = [f for f in findings if f.category == "precision"]
    assert precision and precision[0].severity == "error"
    assert 'input_precision="ieee"' in precision[0].direction


def test_the_errors_against_the_truth_are_abs_errors_and_the_ratio_apart():
    exact, tf32, truth = _matmuls()
    result, _ = _patterns(tf32, exact, truth)
    figures = result["stats"]["truth"]
    scale = truth.abs().mul(TOL).add(TOL)
    for name, x in (("candidate", tf32), ("reference", exact)):
        diff = (x.double() - truth).abs()
        assert figures[f"{name}_max_abs"] == pytest.approx(float(diff.max()), rel=1e-3)
        assert figures[f"{name}_mean_abs"] == pytest.approx(float(diff.mean()), rel=1e-3)
        assert figures[f"{name}_error_ratio"] == pytest.approx(float((diff / scale).max()), rel=1e-3)
    assert figures["candidate_max_abs"] != pytest.approx(figures["candidate_error_ratio"], rel=0.1)


def test_a_reference_less_precise_than_the_candidate_is_not_blamed_on_the_kernel():
    exact, tf32, truth = _matmuls()
    result, _ = _patterns(exact, tf32, truth)
    assert _kinds(result) == ["reference-precision"]
    assert [f.severity for f in pattern_findings(result)] == ["error", "info"]


def test_reduced_precision_without_a_truth_is_only_a_warning():
    exact, tf32, _ = _matmuls()
    result, found = _patterns(tf32, exact)
    assert found["reduced-precision"]["confidence"] == 0.5
    assert pattern_findings(result)[1].severity == "warning"


# --- negative cases ----------------------------------------------------------------------------


def test_correct_output_has_no_pattern_and_no_findings():
    reference = _randn(32, 64)
    result, _ = _patterns(reference + 1e-6, reference)
    assert result["stats"]["count_off"] == 0 and result["patterns"] == []
    assert pattern_findings(result) == []


@pytest.mark.parametrize("density", [0.02, 0.3, 0.7, 1.0])
def test_random_noise_is_never_a_tail_periodic_slice_or_tile(density):
    reference = _randn(64, 1024)
    noise = _randn(64, 1024, seed=5) * 0.05 * (torch.rand(64, 1024, generator=_gen(6)) < density)
    result, found = _patterns(reference + noise, reference)
    assert not {"tail", "periodic", "slices", "tile", "transposed", "offset-along-dim"} & set(found)
    assert _kinds(result) == (["everywhere"] if density >= 0.5 else ["scattered"])


def test_noise_in_a_1d_output_is_not_a_flat_tail_or_period():
    reference = _randn(4096)
    _, found = _patterns(reference + 0.01 * _randn(4096, seed=2), reference)
    assert not {"tail", "periodic"} & set(found)


# --- mismatches --------------------------------------------------------------------------------


def test_shape_rounded_down_by_a_floor_grid():
    result, _ = _patterns(_randn(64, 768), _randn(64, 1000))
    mismatch = result["mismatch"]
    assert mismatch["kind"] == "shape" and mismatch["candidate_shape"] == [64, 768]
    assert mismatch["hint_kinds"] == ["rounded-down"] and "multiple of 256" in mismatch["hint"]
    assert result["patterns"] == [] and result["stats"] is None
    [finding] = pattern_findings(result)  # nothing to compare element by element: the shape alone
    assert finding.category == "shape" and "(64, 768)" in finding.title
    assert "triton.cdiv" in finding.direction


def test_transposed_shape_with_transposed_values():
    reference = _randn(64, 128)
    result, _ = _patterns(reference.t().contiguous(), reference)
    assert {"same-numel", "transposed-shape", "values-transposed"} <= set(result["mismatch"]["hint_kinds"])


def test_padded_shape_and_dtype_mismatch():
    padded, _ = _patterns(_randn(1024), _randn(1000))
    assert padded["mismatch"]["hint_kinds"] == ["rounded-up"]
    reference = _randn(16, 16)
    result, _ = _patterns(reference.half(), reference)
    assert result["mismatch"]["kind"] == "dtype" and result["mismatch"]["candidate_dtype"] == "float16"
    assert result["patterns"] == [] and result["stats"]["count"] == 256
    assert [f.category for f in pattern_findings(result)] == ["wrong-values", "shape"]


# --- odd inputs --------------------------------------------------------------------------------


def test_zero_dim_inf_and_large_sampled_outputs():
    scalar, _ = _patterns(torch.tensor(3.0), torch.tensor(2.0))
    assert scalar["shape"] == [] and scalar["stats"]["max_abs"] == 1.0
    reference = _randn(256) * 100
    candidate = reference.clone()
    candidate[10:20] = float("inf")  # exp overflow
    _, found = _patterns(candidate, reference)
    assert found["nonfinite"]["data"]["inf_count"] == 10 and "overflow" in found["nonfinite"]["description"]
    big = _randn(1024, 1536)
    result, found = _patterns(big * 2, big)
    assert result["sampled"]["of"] == 1024 * 1536 and result["sampled"]["size"] < big.numel()
    assert _kinds(result) == ["scale"] and found["scale"]["data"]["factor"] == pytest.approx(2.0)
    half, found = _patterns((big[:, :1024] * 0.5).bfloat16(), big[:, :1024].bfloat16())
    assert half["dtype"] == "bfloat16" and "scale" in found


# --- findings ----------------------------------------------------------------------------------


def test_findings_lead_with_the_numbers_then_each_pattern():
    x = _randn(1000)
    reference = x * 2 + 0.5
    candidate = reference.clone()
    candidate[768:] = float("nan")
    findings = pattern_findings(error_pattern(candidate, reference, TOL, TOL))
    assert findings[0].category == "wrong-values" and findings[0].severity == "error"
    assert "232 of 1000 elements" in findings[0].evidence[0]
    categories = {f.category: f for f in findings}
    assert {"nan", "error-pattern"} <= set(categories)
    tail = next(f for f in findings if f.data.get("kind") == "tail")
    assert "triton.cdiv" in tail.direction and tail.data["start"] == 768
    assert "other=" in categories["nan"].direction


# --- nondeterminism ----------------------------------------------------------------------------


def test_identical_runs_are_not_nondeterministic():
    x = _randn(8, 16)
    x[0, 0] = float("nan")
    assert nondeterminism(x, x.clone()) is None


def test_rounding_differences_are_a_warning_and_a_race_is_an_error():
    first = _randn(64, 32)
    rounding = first.clone()
    rounding[3, 5] = torch.nextafter(rounding[3, 5], torch.tensor(10.0))  # atomics summing in another order
    repeat = nondeterminism(first, rounding)
    assert repeat["count"] == 1 and repeat["first_index"] == [3, 5] and repeat["rows"] == 1
    assert repeat["within_tolerance_of_each_other"] is True and repeat["max_ulps"] <= 1.5
    json.dumps(repeat, allow_nan=False)
    [finding] = race_findings(repeat)
    assert finding.category == "race" and finding.severity == "warning"

    raced = first.clone()
    raced[10:12] = 0.0  # another program overwrote two rows
    repeat = nondeterminism(first, raced)
    assert repeat["count"] == 64 and repeat["first_index"] == [10, 0] and repeat["first_rows"] == [10, 11]
    assert repeat["within_tolerance_of_each_other"] is False
    [finding] = race_findings({**repeat, "tolerance": 1e-4})
    assert finding.severity == "error" and "atomic" in finding.direction
    # the evaluator's tolerance decides: a loose one makes a small difference benign
    small = nondeterminism(first, first + 1e-3)
    assert race_findings({**small, "tolerance": 1e-2})[0].severity == "warning"
    assert race_findings({**small, "tolerance": 1e-4})[0].severity == "error"
    assert race_findings(None) == []


def test_nondeterminism_figures_merge_across_chunks(monkeypatch):
    """Two runs of a large output are compared a chunk at a time; the figures are those of one pass."""
    from kfoundry.diagnose import numeric

    g = torch.Generator().manual_seed(5)
    a = torch.randn(40, 250, generator=g)
    b = a.clone()
    b[3, 7] += 1e-6
    b[30, 100] = float("inf")
    b[39, 249] *= 1.5
    whole = nondeterminism(a, b)
    monkeypatch.setattr(numeric, "REPEAT_CHUNK", 1024)
    assert nondeterminism(a, b) == whole
    assert whole["count"] == 3 and whole["nonfinite"] == 1 and whole["first_index"] == [3, 7]
