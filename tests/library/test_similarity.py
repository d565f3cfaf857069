import textwrap

import pytest

from kfoundry.library.similarity import kind_label, kind_match, same_class, similarity
from kfoundry.problem_signature import signature

MAXPOOL_RELU = '''
import torch
import torch.nn as nn

batch_size = 2
channels = 3
size = 8


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(2)

    def forward(self, x):
        return torch.relu(self.pool(x))


def get_inputs():
    return [torch.randn(batch_size, channels, size, size)]


def get_init_inputs():
    return []
'''

ROW_MEAN = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x.mean(dim=-1))


def get_inputs():
    return [torch.randn(2, 3, 8, 8)]


def get_init_inputs():
    return []
'''

# a pooling problem's signature as an older kfoundry stored it: pooling was a reduction then
OLD_POOLING = {"problem": "old_pool", "kind": "reduction+pointwise", "categories": ["pointwise", "reduction"],
               "ops": ["aten.max_pool2d_with_indices", "aten.relu"],
               "compute_ops": ["aten.max_pool2d_with_indices", "aten.relu"],
               "inputs": [{"shape": [2, 3, 8, 8], "dtype": "float32"}],
               "outputs": [{"shape": [2, 3, 4, 4], "dtype": "float32"}]}


def _sig(tmp_path, name, text):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(text))
    return signature(path)


def test_old_pooling_entry_matches_a_new_pooling_problem(tmp_path):
    new = _sig(tmp_path, "maxpool_relu", MAXPOOL_RELU)
    assert new["kind"] == "pooling+pointwise"
    assert kind_label(OLD_POOLING) == "pooling+pointwise"
    assert same_class(new, OLD_POOLING) and same_class(OLD_POOLING, new)
    assert kind_match(kind_label(new), kind_label(OLD_POOLING)) == 1.0
    assert similarity(new, OLD_POOLING) == pytest.approx(similarity(new, {**OLD_POOLING, "kind": new["kind"]}))


def test_old_pooling_entry_no_longer_matches_a_reduction(tmp_path):
    reduction = _sig(tmp_path, "row_mean", ROW_MEAN)
    assert reduction["kind"] == "reduction+pointwise"  # what the old entry's stored kind says
    assert not same_class(reduction, OLD_POOLING)
    pooling = _sig(tmp_path, "maxpool_relu", MAXPOOL_RELU)
    assert similarity(pooling, OLD_POOLING) > similarity(reduction, OLD_POOLING)


def test_signatures_without_ops_use_their_stored_kind():
    insight = {"kind": "softmax", "ops": [], "compute_ops": []}
    assert kind_label(insight) == "softmax"
    assert same_class(insight, {"ops": ["aten._softmax", "aten.mul"]})
    assert not same_class(insight, {"ops": ["aten.mm"]})
    assert not same_class({}, {}) and not same_class(insight, {"problem": "x"})


def test_similarity_of_a_signature_with_itself_is_one(tmp_path):
    sig = _sig(tmp_path, "maxpool_relu", MAXPOOL_RELU)
    assert similarity(sig, sig) == pytest.approx(1.0)
    assert similarity(sig, {}) == 0.0
