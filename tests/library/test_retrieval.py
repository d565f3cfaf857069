import textwrap

import pytest

from kfoundry.errors import UsageError
from kfoundry.library import Library, embeddings
from kfoundry.library.store import semantic_by_default
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
    assert set(results[0]) >= {"title", "text", "source", "score", "why", "similarity"}
    # the gemm kernel and the gemm note pass; the kernels of other classes are under the floor
    assert [r["type"] for r in results] == ["kernel", "insight"]
    assert results[0]["score"] >= results[1]["score"]
    assert results[0]["why"].startswith("same class (gemm); ops in common: addmm")


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


# --- semantic retrieval (the optional embedding model) ------------------------------------------------------------

needs_model = pytest.mark.skipif(not embeddings.available(),
                                 reason=f"the optional embedding model is not installed: {embeddings.INSTALL_HINT}")


def _three_kernels(tmp_path):
    lib = Library(tmp_path / "small.sqlite", seed=False)
    lib.add_kernel("Tiled matmul with a fused bias epilogue", {"kind": "gemm"}, "acc += tl.dot(a, b)\n",
                   "Accumulate tl.dot over K tiles in fp32, add the bias, store each output tile once.")
    lib.add_kernel("Pointwise chain in one kernel", {"kind": "pointwise"}, "y = tl.minimum(x * s + b, hi)\n",
                   "Scale, shift and clamp each element in one pass: read each input once, write the output once.")
    softmax = lib.add_kernel("Row softmax", {"kind": "softmax"}, "e = tl.exp(x - tl.max(x, 0))\ny = e / tl.sum(e, 0)\n",
                             "One program per row: subtract the row max, exponentiate, divide by the row sum.")
    return lib, softmax


@needs_model
def test_semantic_retrieval_finds_what_a_query_in_other_words_means(tmp_path):
    lib, softmax = _three_kernels(tmp_path)
    # softmax in other words: no word of the query is in any item, so BM25 scores them all 0; with no problem
    # signature to compare, an item needs some text match, and none is retrieved
    query = "class probabilities from logits"
    assert lib.retrieve({}, query_text=query, k=3, semantic=False) == []
    by_meaning = lib.retrieve({}, query_text=query, k=3, semantic=True)
    assert by_meaning[0]["id"] == softmax and by_meaning[0]["score"] > by_meaning[1]["score"] + 0.1
    lib.close()


@needs_model
def test_item_embeddings_are_computed_once_and_kept_in_the_file(tmp_path):
    lib, _ = _three_kernels(tmp_path)
    insight = lib.add_insight("Softmax rows: keep the whole row in registers", {"kind": "softmax"}, origin="rule",
                              key="softmax-rows")
    embedded = []
    real_embed = lib.embedder.embed

    def counting(texts, whole=True):
        embedded.extend(texts)
        return real_embed(texts, whole)

    lib.embedder.embed = counting
    first = lib.retrieve({"kind": "softmax"}, "row softmax", k=4, semantic=True)
    assert len(embedded) == 1 + 4  # the query, then each item once
    assert lib.db.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0] == 4
    embedded.clear()
    assert lib.retrieve({"kind": "softmax"}, "row softmax", k=4, semantic=True) == first
    assert len(embedded) == 1  # only the query
    lib.add_insight("Softmax rows: one program per row, whole row in one block", {"kind": "softmax"},
                    origin="rule", key="softmax-rows")  # edited in place: its document changed
    embedded.clear()
    lib.retrieve({"kind": "softmax"}, "row softmax", k=4, semantic=True)
    assert len(embedded) == 2 and "whole row in one block" in embedded[1]
    assert lib.db.execute("SELECT COUNT(*) FROM embeddings WHERE item_id = ?", (insight,)).fetchone()[0] == 1
    lib.close()
    with Library(tmp_path / "small.sqlite", seed=False) as reopened:
        reopened.embedder.embed = counting
        embedded.clear()
        reopened.retrieve({"kind": "softmax"}, "row softmax", k=4, semantic=True)
        assert len(embedded) == 1


def test_semantic_off_or_unavailable_is_bm25_and_signature_alone(tmp_path, monkeypatch):
    lib, _ = _three_kernels(tmp_path)
    monkeypatch.setattr(embeddings, "available", lambda: False)
    monkeypatch.delenv("KFOUNDRY_SEMANTIC_RETRIEVAL", raising=False)
    assert not semantic_by_default()
    auto = lib.retrieve({"kind": "softmax"}, "row softmax", k=3)
    assert auto == lib.retrieve({"kind": "softmax"}, "row softmax", k=3, semantic=False)
    assert lib._embedder is None  # no model was loaded
    with pytest.raises(UsageError, match=r"kfoundry\[embeddings\]"):
        lib.retrieve({"kind": "softmax"}, "row softmax", semantic=True)
    monkeypatch.setattr(embeddings, "available", lambda: True)
    assert semantic_by_default()
    monkeypatch.setenv("KFOUNDRY_SEMANTIC_RETRIEVAL", "0")
    assert not semantic_by_default()
    lib.close()
