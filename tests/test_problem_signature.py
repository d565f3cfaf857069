import pytest

from kfoundry.errors import UsageError
from kfoundry.problem_signature import kind_of, signature, tokens
from tests.conftest import REPO_DIR

EXAMPLES = REPO_DIR / "examples"
CASES = {
    "linear_epilogue": (dict(batch_size=4, in_features=16, out_features=8), "gemm+pointwise",
                        ["aten.t", "aten.addmm", "aten.silu", "aten.mul"]),
    "conv_relu": (dict(batch_size=1, in_channels=2, out_channels=3, height=6, width=6), "conv+pointwise",
                  ["aten.convolution", "aten.relu", "aten.add"]),
    "layernorm": (dict(batch_size=4, dim=32), "norm", ["aten.native_layer_norm"]),
    "row_softmax": (dict(batch_size=4, dim=40), "softmax", ["aten._softmax"]),
    "pointwise_chain": (dict(batch_size=4, dim=32), "pointwise", ["aten.mul", "aten.add", "aten.gelu", "aten.clamp"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_examples(name):
    set_values, kind, ops = CASES[name]
    sig = signature(EXAMPLES / name / "problem.py", set_values)
    assert sig["ops"] == ops and sig["kind"] == kind
    assert sig["problem"] == "problem" and sig["set"] == set_values
    assert sig["inputs"][0]["dtype"] == "float32"
    assert kind.split("+")[0] in sig["text"].split()


def test_shapes_and_parameters():
    sig = signature(EXAMPLES / "linear_epilogue" / "problem.py", dict(batch_size=4, in_features=16, out_features=8))
    assert sig["inputs"] == [{"shape": [4, 16], "dtype": "float32"}]
    assert sig["outputs"] == [{"shape": [4, 8], "dtype": "float32"}]
    assert sig["parameters"] == [{"name": "linear.weight", "shape": [8, 16], "dtype": "float32"},
                                 {"name": "linear.bias", "shape": [8], "dtype": "float32"}]
    assert sig["modules"] == ["linear"] and sig["compute_ops"] == ["aten.addmm", "aten.silu", "aten.mul"]


def test_meta_device_gives_full_size_shapes_without_computing():
    sig = signature(EXAMPLES / "conv_relu" / "problem.py", dict(batch_size=2), device="meta")
    assert sig["outputs"][0]["shape"] == [2, 128, 128, 128]


def test_kind_labels_and_tokens():
    assert kind_of(["aten.mm", "aten.sum"]) == "gemm+reduction"
    assert kind_of(["aten.sum", "aten.div"]) == "reduction+pointwise"
    assert kind_of(["aten.view"]) == "other"
    assert tokens("aten.addmm gemm+pointwise") == ["addmm", "gemm", "pointwise"]


def test_bad_override_is_a_usage_error():
    with pytest.raises(UsageError):
        signature(EXAMPLES / "layernorm" / "problem.py", {"nope": 1})
