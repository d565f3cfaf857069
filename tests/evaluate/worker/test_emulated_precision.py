"""kfoundry.evaluate.worker.emulated_precision: tl.dot on the CPU rounded as an NVIDIA GPU's tensor cores round, so a
CPU verdict on a TF32 kernel is the GPU's (benchmarks/precision_agreement measured both on an H200)."""

import sys

import numpy as np
import pytest

from kfoundry.evaluate import EvalOptions, Evaluator
from kfoundry.evaluate.parent.precision_check import describe, precision_record
from kfoundry.evaluate.worker.emulated_precision import emulated_dot, tf32
from tests.conftest import REPO_DIR

AGREEMENT = REPO_DIR / "benchmarks" / "precision_agreement"


def _bits(values) -> list[int]:
    return [int(b) for b in np.asarray(values, dtype=np.float32).view(np.uint32)]


def test_tf32_drops_or_rounds_the_low_13_mantissa_bits_and_keeps_inf_and_nan():
    x = np.array([1.0 + 2.0 ** -11, 1.0 + 2.0 ** -10 + 2.0 ** -11, -(1.0 + 2.0 ** -11 + 2.0 ** -20), np.inf, np.nan],
                 dtype=np.float32)
    assert _bits(tf32(x, "rz")[:3]) == _bits([1.0, 1.0 + 2.0 ** -10, -1.0])
    # to nearest, a tie away from zero; beyond a tie up in magnitude
    assert _bits(tf32(x, "rna")[:3]) == _bits([1.0 + 2.0 ** -10, 1.0 + 2.0 ** -9, -(1.0 + 2.0 ** -10)])
    assert np.isinf(tf32(x)[3]) and np.isnan(tf32(x)[4])
    with pytest.raises(ValueError, match="rz or rna"):
        tf32(x, "even")


def test_tf32x3_is_the_compiler_s_split_and_close_to_fp32():
    rng = np.random.default_rng(0)
    b = (rng.standard_normal((16, 16)) * 10.0 ** rng.uniform(-3, 3, (16, 16))).astype(np.float32)
    eye, zero = np.eye(16, dtype=np.float32), np.zeros((16, 16), np.float32)
    big = tf32(b, "rna")
    assert np.array_equal(emulated_dot(eye, b, zero, "tf32x3"), big + tf32(b - big))
    assert np.array_equal(emulated_dot(eye, b, zero, "tf32"), tf32(b))
    assert np.array_equal(emulated_dot(eye, b, zero, "ieee"), b)
    inf = b.copy()
    inf[0, 0] = np.inf  # small = inf - inf is NaN: the compiler drops it, the big product keeps the inf
    assert np.isinf(emulated_dot(eye, inf, zero, "tf32x3")[0, 0])


def test_the_precision_record_says_where_it_was_checked():
    assert describe(precision_record("cuda:0", None, None)) == "precision checked on the GPU"
    record = precision_record("cpu", {"emulated": {"tf32": 4, "tf32x3": 2}, "exact": {"ieee": 1}}, ["mm", "add"])
    text = describe(record)
    assert text.startswith("precision emulated on the CPU: tl.dot emulated as on a GPU (TF32 x4, TF32x3 x2)")
    assert "PyTorch's mm called by the candidate ran in IEEE fp32 here" in text
    assert describe(precision_record("cpu", {"emulated": {}, "exact": {}}, [])).endswith("no TF32 tl.dot to emulate")
    # a wrong output judged while its worker ran on: no count, the rounding all the same
    assert describe(precision_record("cpu", None, None)).endswith("tl.dot rounded as a GPU's tensor cores round")


def test_a_tf32_dot_fails_on_the_cpu_as_on_a_gpu_and_tf32x3_passes(tmp_path):
    sys.path.insert(0, str(AGREEMENT))
    try:
        from candidates import source
    finally:
        sys.path.remove(str(AGREEMENT))
    options = EvalOptions(device="cpu", trials=1, seed=1, baselines=(), timeout_s=120,
                          set_values={"batch_size": 16, "in_features": 256, "out_features": 64})
    verdicts = {}
    with Evaluator(AGREEMENT / "linear_bias.py", options) as evaluator:
        for dot in ("tf32", "tf32x3"):
            path = tmp_path / f"linear_{dot}.py"
            path.write_text(source("linear_bias", dot))
            verdicts[dot] = evaluator.evaluate(path)
    assert verdicts["tf32"].status == "wrong_output"
    assert verdicts["tf32"].correctness.error_ratio_candidate > 1
    assert verdicts["tf32x3"].status == "ok"
    assert verdicts["tf32"].precision["checked"] == "cpu"
    assert verdicts["tf32x3"].precision["dots"]["emulated"]["tf32x3"] > 0
