"""A worker's side of the transport: a check's answer can bring the next set's inputs with it (the
worker's process is exercised end to end by test_evaluator.py; CUDA IPC itself only on a GPU)."""

import pytest
import torch

from kfoundry.evaluate.shared import transport
from kfoundry.evaluate.worker import candidate_job
from kfoundry.evaluate.worker.candidate_job import Exchange

LAYOUT = {name: transport.describe_tree([torch.zeros(shape)], transport.tensor_meta)
          for name, shape in (("0", (2, 3)), ("1", (4,)))}


class Channel:
    def __init__(self, filled: bool):
        self.filled = filled
        self.requests = []

    def request(self, kind, **data):
        self.requests.append((kind, data))
        if kind == "check":
            return {"ok": True, "filled": self.filled and "fill" in data}
        return {"ok": True}


@pytest.fixture
def cpu_ipc(monkeypatch):
    """Descriptors of CPU tensors stand in for CUDA IPC handles: only what the worker sends is looked at."""
    monkeypatch.setattr(transport, "share", lambda x: {**transport.tensor_meta(x), "ptr": x.data_ptr()})
    monkeypatch.setattr(torch.cuda, "ipc_collect", lambda: None)


def test_a_check_brings_the_next_sets_inputs_with_its_answer(tmp_path, cpu_ipc):
    channel = Channel(filled=True)
    exchange = Exchange(channel, "cpu", "ipc", tmp_path, layouts=LAYOUT)
    exchange.check("trial 0", "0", torch.zeros(2), then="1")
    kind, data = channel.requests[-1]
    assert kind == "check" and data["fill"]["set"] == "1"
    [buffer] = exchange.inputs("1")
    assert len(channel.requests) == 1  # no order of its own for set 1
    assert buffer.shape == (4,) and data["fill"]["buffers"]["list"][0]["tensor"]["ptr"] == buffer.data_ptr()
    exchange.inputs("1")  # taken once: asked for again, it is filled by an order of its own
    assert channel.requests[-1][0] == "fill" and channel.requests[-1][1]["set"] == "1"


def test_without_the_judges_fill_the_worker_asks_for_the_set(tmp_path, cpu_ipc):
    channel = Channel(filled=False)
    exchange = Exchange(channel, "cpu", "ipc", tmp_path, layouts=LAYOUT)
    exchange.check("trial 0", "0", torch.zeros(2), then="1")
    exchange.inputs("1")
    assert [kind for kind, _ in channel.requests] == ["check", "fill"]


def test_files_and_unknown_layouts_carry_no_fill(tmp_path, cpu_ipc):
    channel = Channel(filled=True)
    Exchange(channel, "cpu", "file", tmp_path, layouts=LAYOUT).check("trial 0", "0", torch.zeros(2), then="1")
    Exchange(channel, "cpu", "ipc", tmp_path, layouts=LAYOUT).check("trial 0", "0", torch.zeros(2), then="probe")
    assert all("fill" not in data for _, data in channel.requests)


def test_a_stopped_check_keeps_no_buffers(tmp_path, cpu_ipc):
    class Stopping(Channel):
        def request(self, kind, **data):
            super().request(kind, **data)
            return {"stop": True, "reason": "trial 0 failed"}

    exchange = Exchange(Stopping(filled=True), "cpu", "ipc", tmp_path, layouts=LAYOUT)
    with pytest.raises(candidate_job.Stopped):
        exchange.check("trial 0", "0", torch.zeros(2), then="1")
    assert not exchange._filled
