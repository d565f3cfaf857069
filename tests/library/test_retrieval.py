import textwrap

from kfoundry.problem_signature import signature

LINEAR_RELU = '''
import torch
import torch.nn as nn

batch_size = 8
in_features = 16
out_features = 12


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.fc(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''

SCALED_SOFTMAX = '''
import torch
import torch.nn as nn

batch_size = 4
seq = 8
dim = 50


class Model(nn.Module):
    def __init__(self, temperature):
        super().__init__()
        self.temperature = temperature

    def forward(self, x):
        return torch.softmax(x / self.temperature, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, seq, dim)]


def get_init_inputs():
    return [0.7]
'''


def _sig(tmp_path, name, text):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(text))
    return signature(path)


def test_linear_relu_retrieves_the_gemm_epilogue_kernel_first(lib, tmp_path):
    results = lib.retrieve(_sig(tmp_path, "linear_relu", LINEAR_RELU), k=3)
    assert results[0]["title"].startswith("GEMM with a fused epilogue")
    assert "code" in results[0] and "tl.dot" in results[0]["code"]
    assert set(results[0]) >= {"title", "text", "source", "score"}
    assert results[0]["score"] >= results[1]["score"] >= results[2]["score"]


def test_softmax_variant_retrieves_the_row_softmax_kernel(lib, tmp_path):
    results = lib.retrieve(_sig(tmp_path, "scaled_softmax", SCALED_SOFTMAX), k=3)
    assert results[0]["title"].startswith("Row softmax")


def test_query_text_steers_retrieval(lib):
    results = lib.retrieve({}, query_text="layernorm variance rsqrt", k=1)
    assert results[0]["title"].startswith("LayerNorm")


def test_improving_steps_are_retrievable_failed_ones_are_not(lib, tmp_path):
    sig = _sig(tmp_path, "linear_relu", LINEAR_RELU)
    good = lib.record_step(sig, "fusion", "a = 1\n", "a = 2\n", ["memory-bound"], "ok", 1.0, 2.0, "H200")
    bad = lib.record_step(sig, "fusion", "a = 1\n", "a = 3\n", ["memory-bound"], "wrong_output", 1.0, None)
    ids = {r["id"] for r in lib.retrieve(sig, k=50)}
    assert good in ids and bad not in ids


def test_search_is_bm25_over_text(lib):
    results = lib.search("implicit gemm convolution im2col")
    assert results and results[0]["title"].startswith("Conv2d as an implicit GEMM")
    assert lib.search("zzzqqq") == []
