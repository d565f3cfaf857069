"""kfoundry.evaluate.reference.index_sources: finding which argmax/argmin produced an integer output."""

import torch

from kfoundry.evaluate.reference.index_sources import IndexRecorder


def test_argmax_output_is_traced_to_its_values():
    x = torch.randn(4, 7)
    recorder = IndexRecorder()
    with recorder:
        scores = x * 2.0
        out = torch.argmax(scores, dim=1)
    sources = recorder.sources_for(out)
    assert set(sources) == {0}
    assert sources[0]["dim"] == 1 and sources[0]["keepdim"] is False
    assert torch.equal(sources[0]["values"], x * 2.0)


def test_max_with_dim_traces_its_indices_output():
    x = torch.randn(3, 5)
    recorder = IndexRecorder()
    with recorder:
        values, indices = torch.max(x, dim=-1, keepdim=True)
    sources = recorder.sources_for((values, indices))
    assert set(sources) == {1}  # output 0 is the float values, output 1 the indices
    assert sources[1]["dim"] == 1  # a negative dim is normalized
    assert sources[1]["keepdim"] is True


def test_integer_outputs_of_other_ops_have_no_source():
    recorder = IndexRecorder()
    with recorder:
        out = torch.arange(5) * 2
    assert recorder.sources_for(out) == {}
