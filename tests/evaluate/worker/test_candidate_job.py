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


PROBLEM_WITH_STATE = '''import torch
from torch import nn

batch_size = 2
width = 5


class Model(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.h0 = torch.randn(batch_size, width)  # the module-level constant, read in __init__

    def forward(self, x):
        return x + self.h0


def get_inputs():
    return [torch.randn(batch_size, width)]


def get_init_inputs():
    return [width]
'''

# written from the problem file, as an LLM or the composer writes candidates: its own copy of batch_size
CANDIDATE_WITH_STATE = '''import torch
import triton
import triton.language as tl
from torch import nn

batch_size = 2
width = 5


@triton.jit
def _add(x_ptr, h_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(h_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.h0 = torch.randn(batch_size, width)

    def forward(self, x):
        out = torch.empty_like(x)
        h0 = self.h0.to(x.device).contiguous()
        _add[(triton.cdiv(x.numel(), 64),)](x.contiguous(), h0, out, x.numel(), BLOCK=64)
        return out
'''


def test_a_candidates_copy_of_a_set_constant_takes_the_problems_value(tmp_path):
    """`--set batch_size=3`: the problem's Model builds its state from batch_size = 3; a candidate written from the
    problem file keeps its own `batch_size = 2`, which must follow, or every such candidate is wrong at the set
    size (the composer's bidirectional RNNs were: their h0 kept the file's batch)."""
    from kfoundry.evaluate import EvalOptions, Evaluator

    problem, candidate = tmp_path / "problem.py", tmp_path / "candidate.py"
    problem.write_text(PROBLEM_WITH_STATE)
    candidate.write_text(CANDIDATE_WITH_STATE)
    options = EvalOptions(device="cpu", trials=1, seed=7, timeout_s=120, set_values={"batch_size": 3})
    with Evaluator(problem, options) as evaluator:
        evaluation = evaluator.evaluate(candidate)
    assert evaluation.status == "ok", evaluation.message


def test_only_the_constants_the_candidate_defines_follow_the_set_values(tmp_path):
    import ast

    code = candidate_job.candidate_code(str(tmp_path / "c.py"), "batch_size = 2\nother = batch_size * 2\n",
                                        {"batch_size": 3, "steps": 9})
    namespace: dict = {}
    exec(compile(code, "c.py", "exec"), namespace)
    assert (namespace["batch_size"], namespace["other"], "steps" in namespace) == (3, 6, False)
    assert isinstance(code, ast.Module)
    untouched = "width = 5\n"
    assert candidate_job.candidate_code("c.py", untouched, {"batch_size": 3}) == untouched
    assert candidate_job.candidate_code("c.py", untouched, None) == untouched
