"""benchmarks/composer_variants.py on the CPU: the problems it picks, the exploration grid it puts in the
composer's place, and what it writes when the worker cannot time anything (no GPU here)."""

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "benchmarks" / "composer_variants.py"


@pytest.fixture
def cv():
    spec = importlib.util.spec_from_file_location("composer_variants_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_problems_by_leading_number(cv):
    assert [p.name for p in cv.suite_problems("5,19-20")] == [
        "5_conv_relu.py", "19_conv_transpose2d_bias_clamp.py", "20_conv2d_stride2_hardswish.py"]


def test_the_grid_replaces_the_convolution_configurations(cv, monkeypatch):
    from kfoundry.experts.composer import compose
    from kfoundry.experts.composer.templates import conv

    monkeypatch.setattr(conv, "configs", conv.configs)  # restored after the test
    cv.use_conv_grid()
    plain = compose(REPO / "benchmarks" / "suite" / "20_conv2d_stride2_hardswish.py", max_variants=20)
    layouts = [next(iter(c.config.values()))["layout"] for c in plain.candidates]
    assert len(plain.candidates) == len(cv.CONV_GRID) and {"channels_last", "taps"} <= set(layouts)
    transposed = compose(REPO / "benchmarks" / "suite" / "19_conv_transpose2d_bias_clamp.py", max_variants=20)
    assert {next(iter(c.config.values()))["layout"] for c in transposed.candidates} == {"phases"}
    # 64 output channels: no tile wider than that
    assert {next(iter(c.config.values()))["BN"] for c in transposed.candidates} == {64}


def test_a_worker_that_cannot_run_is_a_row_not_a_crash(cv, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    target = tmp_path / "variants.json"
    assert cv.main(["--problems", "5", "--max-variants", "1", "--json", str(target)]) == 0
    document = json.loads(target.read_text())
    assert [r["problem"] for r in document["results"]] == ["5_conv_relu"]
    assert "failure" in document["results"][0] and document["device"].startswith("cpu")
    assert "worker failed" in capsys.readouterr().out


def test_outputs_flatten_in_order(cv):
    import torch

    a, b, c = torch.zeros(1), torch.ones(2), torch.arange(3)
    assert [t.numel() for t in cv._flat((a, [b, c]))] == [1, 2, 3]
    assert cv._flat(b)[0] is b


def test_the_composer_is_told_the_rounding_the_judge_would_report(cv, tmp_path, monkeypatch):
    from kfoundry.types import ReferenceRounding

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    # no GPU here: both modes are an fp32 reference, and the file says which the variants were composed for
    assert cv.reference_rounding("device") == cv.reference_rounding("fp32") == ReferenceRounding()
    target = tmp_path / "variants.json"
    assert cv.main(["--problems", "5", "--max-variants", "1", "--json", str(target), "--rounding", "fp32"]) == 0
    document = json.loads(target.read_text())
    assert document["rounding"] == {"error_ratio": None, "conv_tf32": False}
    assert document["command"][1:] == ["benchmarks/composer_variants.py", "--problems", "5", "--max-variants", "1",
                                       "--json", str(target), "--rounding", "fp32"]


def test_row_modes_put_the_flat_loop_beside_each_nested_row_kernel(cv):
    from kfoundry.experts.composer import compose

    composed = compose(REPO / "benchmarks" / "conv_suite" / "18_conv_transpose2d_gelu_groupnorm.py", max_variants=2)
    # the plan without the statistics in the conv's epilogue: the GroupNorm's rows, 4 channels of 98 x 98 positions
    first = next(c for c in composed.candidates if any(k.get("mode") == "nested" for k in c.genome.configs.values()))
    flat = cv.flat_rows(composed.space, first.genome)
    assert flat is not None and flat != first.source
    assert "n_outer" in first.source and "n_outer" not in flat
    assert cv.flat_rows(composed.space, None) is None
    plain = compose(REPO / "benchmarks" / "suite" / "20_conv2d_stride2_hardswish.py", max_variants=1)
    assert cv.flat_rows(plain.space, plain.candidates[0].genome) is None  # no row kernel
    # few long rows (conv_suite 23's GroupNorm: 1024 rows of 4 x 128 x 128): runs of channels, twinned with the
    # flat split the composer would write
    split = compose(REPO / "benchmarks" / "conv_suite" / "23_depthwise_conv2d_groupnorm_silu.py", max_variants=2)
    nested_split = next(c for c in split.candidates if "row_0" in c.genome.configs)
    assert nested_split.genome.configs["row_0"]["mode"] == "nested_split"
    twin = cv.flat_rows(split.space, nested_split.genome)
    assert twin is not None and "chunk = tl.cdiv(n_outer, SPLIT)" in nested_split.source and "n_outer" not in twin
