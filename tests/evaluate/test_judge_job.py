"""The judge's own checks on two runs of a candidate (its process is exercised by test_evaluator.py)."""

import torch

from kfoundry.evaluate import judge_job
from kfoundry.evaluate.judge_job import _garbage_only


def test_garbage_only_tells_unwritten_memory_from_values(monkeypatch):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(5000, generator=g)
    poisoned = a.clone()
    poisoned[[10, 4000]] = float("nan")  # what an unwritten output holds in one run
    poisoned[2000] = 3e38
    raced = a.clone()
    raced[[10, 4000]] += 0.5  # plausible values, a race
    assert _garbage_only(a, poisoned) and not _garbage_only(a, raced)
    monkeypatch.setattr(judge_job, "GARBAGE_CHUNK", 1000)  # chunks and a sample: the same answers
    monkeypatch.setattr(judge_job, "GARBAGE_SAMPLE", 100)
    assert _garbage_only(a, poisoned) and not _garbage_only(a, raced)
    assert not _garbage_only(torch.arange(10), torch.arange(10))


def test_only_orders_that_touch_the_gpu_wait_for_its_lock():
    from types import SimpleNamespace

    from kfoundry.evaluate.judge_job import _needs_gpu

    ref = SimpleNamespace(sets={"0": object()})
    assert not _needs_gpu(ref, {"op": "inputs", "set": "0", "mode": "ipc"})  # a description of what is computed
    assert _needs_gpu(ref, {"op": "inputs", "set": "1", "mode": "ipc"})  # computed now: GPU work
    assert _needs_gpu(ref, {"op": "inputs", "set": "0", "mode": "file"})  # saved from the GPU
    assert _needs_gpu(ref, {"op": "fill", "set": "0"}) and _needs_gpu(ref, {"op": "compare", "set": "0"})
