"""kfoundry.evaluate.reference.expected: the judge's sets in each memory tier give the same inputs, references and truths;
the truth is made when a comparison asks for it outside the resident tier; where the truth is made."""

from pathlib import Path

import pytest
import torch

from kfoundry.errors import ProblemError
from kfoundry.evaluate.reference import truth as truths
from kfoundry.evaluate.reference.compare import flatten_outputs
from kfoundry.evaluate.reference.expected import Reference, detached
from kfoundry.evaluate.reference.judge_job import prepare

PROBLEM = """import torch
import torch.nn as nn

batch_size = 8
dim = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return torch.softmax(x * self.scale, dim=1), x.argmax(dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
"""


def _job(path: Path, tmp_path: Path) -> dict:
    return {"problem_path": str(path), "problem_text": path.read_text(), "overrides": {}, "device": "cpu",
            "precision": "fp32", "init_seed": 3, "eval_mode": False, "trial_seeds": [11, 12], "probe_seed": 99,
            "tolerance": 1e-4, "exchange_dir": str(tmp_path), "cache_dir": None, "measure_device": False}


def _reference(tmp_path: Path, tier: str, truth: str = "device", text: str = PROBLEM) -> Reference:
    path = tmp_path / "problem.py"
    path.write_text(text)
    ref = Reference(_job(path, tmp_path), channel=None)
    ref.set_plan(tier, truth)
    return ref


def _full_truth(ref: Reference, name: str) -> list:
    expected = ref.get(name)
    truth = ref.truth_for(expected)
    return [truths.as_float64(t, r) for t, r in zip(flatten_outputs(truth), flatten_outputs(expected.reference))]


class _Channel:
    def phase(self, name):
        pass


@pytest.mark.parametrize("tier,truth", [("host", "device"), ("per_set", "device"), ("per_set", "host")])
def test_every_tier_gives_the_resident_tiers_sets(tmp_path, tier, truth):
    resident = _reference(tmp_path, "resident")
    prepare(resident, _Channel())
    other = _reference(tmp_path, tier, truth)
    result = prepare(other, _Channel())
    assert result["tier"] == tier and result["truth"] == "float64"
    for name in ("1", "0", "outlier", "probe"):  # out of order: sets are drawn again, or brought back
        a, b = resident.get(name), other.get(name)
        assert all(torch.equal(x, y) for x, y in zip(a.inputs, b.inputs))
        assert all(torch.equal(x, y) for x, y in zip(flatten_outputs(a.reference), flatten_outputs(b.reference)))
        assert set(a.index_sources) == set(b.index_sources) == {1}  # the argmax output's source
        for x, y in zip(_full_truth(resident, name), _full_truth(other, name)):
            assert torch.equal(x, y)
    assert len(other.sets) == 1  # one set at a time on the device


def test_outside_the_resident_tier_the_truth_waits_for_a_comparison(tmp_path):
    ref = _reference(tmp_path, "per_set")
    prepare(ref, _Channel())
    expected = ref.get("1")
    assert expected.truth is None  # allclose comparisons need none
    assert ref.truth_for(expected) is not None and expected.truth is not None
    assert ref.model64 is not None and next(ref.model64.parameters()).dtype == torch.float64


def test_without_room_for_the_truth_there_is_none_and_the_status_says_why(tmp_path):
    ref = _reference(tmp_path, "per_set", "none")
    result = prepare(ref, _Channel())
    assert "does not fit in memory" in result["truth"]
    assert ref.truth_for(ref.get("1")) is None


def test_inputs_that_do_not_come_again_from_their_seed_are_refused_outside_the_resident_tier(tmp_path):
    drifting = PROBLEM.replace("return [torch.randn(batch_size, dim)]",
                               "global calls\n    calls += 1\n    return [torch.randn(batch_size, dim) + calls]"
                               ).replace("def get_inputs():", "calls = 0\n\n\ndef get_inputs():")
    with pytest.raises(ProblemError, match="does not give the same inputs again"):
        prepare(_reference(tmp_path, "per_set", text=drifting), _Channel())
    prepare(_reference(tmp_path, "resident", text=drifting), _Channel())  # every set kept: never drawn again


def test_a_large_output_is_not_copied_but_one_aliasing_a_parameter_is(monkeypatch):
    from kfoundry.evaluate.reference import expected as module

    monkeypatch.setattr(module, "SMALL_OUTPUT", 0)
    weight = torch.randn(10)
    made = torch.randn(10)
    out = detached([made, weight[2:]], owned={weight.untyped_storage().data_ptr()})
    assert out[0].data_ptr() == made.data_ptr()
    assert out[1].data_ptr() != weight[2:].data_ptr()
