import pytest

from kfoundry.errors import UsageError
from kfoundry.problem_signature import CATEGORIES, CLASSES, kind_of, op_category, problem_class, signature, tokens
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


PROBLEM = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
{init}

    def forward(self, {args}):
{body}


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return []
'''

QKV = "torch.randn(2, 2, 6, 4), torch.randn(2, 2, 6, 4), torch.randn(2, 2, 6, 4)"
# name -> (init lines, forward args, forward body, inputs, class, kind)
PROBLEMS = {
    "cumsum": ("pass", "x", "return torch.cumsum(x, dim=1)", "torch.randn(4, 9)", "scan", "scan"),
    "maxpool": ("self.pool = nn.MaxPool2d(2)", "x", "return self.pool(x)", "torch.randn(2, 3, 8, 8)",
                "pooling", "pooling"),
    "sdpa": ("pass", "q, k, v", "return F.scaled_dot_product_attention(q, k, v)", QKV, "attention", "attention"),
    "hand_attention": ("pass", "q, k, v",
                       "return torch.softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1) @ v", QKV,
                       "attention", "attention"),
    "conv_maxpool": ("self.conv = nn.Conv2d(3, 4, 3)\n        self.pool = nn.MaxPool2d(2)", "x",
                     "return self.pool(torch.relu(self.conv(x)))", "torch.randn(1, 3, 10, 10)",
                     "conv", "conv+pooling"),
    "gemm_relu": ("self.fc = nn.Linear(16, 8)", "x", "return torch.relu(self.fc(x))", "torch.randn(4, 16)",
                  "gemm", "gemm+pointwise"),
    "gemm_cumsum": ("self.fc = nn.Linear(16, 8)", "x", "return torch.cumsum(self.fc(x), dim=-1)",
                    "torch.randn(4, 16)", "gemm", "gemm+scan"),
    "lstm": ("self.rnn = nn.LSTM(6, 5, num_layers=2)", "x", "return self.rnn(x)[0]", "torch.randn(7, 3, 6)",
             "recurrent", "recurrent"),
    "gru_head": ("self.rnn = nn.GRU(6, 5)\n        self.head = nn.Linear(5, 2)", "x",
                 "return self.head(self.rnn(x)[1][0])", "torch.randn(7, 3, 6)", "recurrent", "recurrent+gemm"),
    "rnn_cell_loop": ("self.cell = nn.RNNCell(6, 5)", "x",
                      "h = torch.zeros(3, 5)\n        for t in range(7):\n            h = self.cell(x[t], h)\n"
                      "        return h", "torch.randn(7, 3, 6)", "recurrent", "recurrent"),
    "attention_out_proj": ("self.out = nn.Linear(4, 4)", "q, k, v",
                           "return self.out(torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v)", QKV,
                           "attention", "attention+gemm"),
}


def write_problem(tmp_path, name):
    init, args, body, inputs = PROBLEMS[name][:4]
    path = tmp_path / f"{name}.py"
    path.write_text(PROBLEM.format(init="        " + init, args=args, body="        " + body, inputs=inputs))
    return path


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_problem_classes_of_real_signatures(tmp_path, name):
    sig = signature(write_problem(tmp_path, name))
    cls, kind = PROBLEMS[name][4:]
    assert problem_class(sig) == problem_class(sig["ops"]) == cls
    assert sig["kind"] == kind and cls in sig["categories"] and cls in sig["text"].split()


def test_sdpa_is_attention_on_the_meta_device_too(tmp_path):
    # on meta, sdpa runs its math form (bmm, _safe_softmax, bmm) with q and k scaled first
    sig = signature(write_problem(tmp_path, "sdpa"), device="meta")
    assert "aten._safe_softmax" in sig["ops"] and sig["kind"] == "attention"


def test_scan_and_pooling_are_no_longer_reductions_nor_sdpa_a_gemm():
    assert op_category("aten.cumsum") == "scan" and op_category("aten.logcumsumexp") == "scan"
    assert op_category("aten.max_pool2d_with_indices") == "pooling"
    assert op_category("aten._adaptive_avg_pool2d") == "pooling"
    assert op_category("aten._scaled_dot_product_flash_attention_for_cpu") == "attention"
    assert op_category("aten.sum") == "reduction" and op_category("aten.bmm") == "gemm"
    assert all(not names & CATEGORIES["reduction"] for c, names in CATEGORIES.items() if c != "reduction")


def test_class_order_and_labels():
    assert CLASSES == ("conv", "attention", "recurrent", "gemm", "scan", "pooling", "norm", "softmax",
                       "reduction", "pointwise", "other")
    assert kind_of(["aten.avg_pool2d", "aten.mul"]) == "pooling+pointwise"
    assert kind_of(["aten.max_pool2d_with_indices", "aten.sum"]) == "pooling+reduction"
    assert kind_of(["aten.mm", "aten._softmax"]) == "gemm+softmax"  # no second gemm: not attention
    assert kind_of(["aten._softmax", "aten.mm"]) == "gemm+softmax"
    assert kind_of(["aten.cumsum", "aten._softmax"]) == "scan+softmax"
    assert problem_class(["aten.view"]) == "other" and problem_class(["aten.relu"]) == "pointwise"
    # two attentions in a row, each with its own gemm, softmax, gemm
    assert kind_of(["aten.bmm", "aten._softmax", "aten.bmm"] * 2) == "attention"


def test_a_recurrence_is_a_repeated_step_of_two_gemms_and_a_gate_not_a_repeated_layer():
    step = ["aten.t", "aten.addmm", "aten.t", "aten.addmm", "aten.add", "aten.tanh"]
    assert kind_of(step * 4) == "recurrent" and kind_of(step * 2) == "gemm+pointwise"  # three steps at least
    mlp = ["aten.t", "aten.addmm", "aten.tanh"]  # a deep MLP: one gemm per repeated layer
    assert kind_of(mlp * 6) == "gemm+pointwise"
    ffn = ["aten.addmm", "aten.gelu", "aten.addmm", "aten.add"]  # a transformer's feed-forward layers
    assert kind_of(ffn * 4) == "gemm+pointwise"
    assert op_category("aten._thnn_fused_lstm_cell") == "recurrent" and op_category("aten.lstm") == "recurrent"


def test_old_stored_signature_gets_the_new_class():
    old = {"kind": "reduction+pointwise", "ops": ["aten.max_pool2d_with_indices", "aten.relu"],
           "categories": ["pointwise", "reduction"]}
    assert problem_class(old) == "pooling"
    assert problem_class({"kind": "softmax", "ops": []}) == "softmax"  # no ops: the stored kind
    assert problem_class({"kind": "mystery+pointwise"}) == "other" and problem_class({}) == "other"
