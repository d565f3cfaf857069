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


def test_orders_are_served_at_once_but_one_comparison_at_a_time(monkeypatch):
    """Fills overlap each other and a comparison; comparisons (their scratch memory is planned once) and
    inputs written to files never overlap each other. Each answer goes out with its order's id."""
    import threading
    import time
    from types import SimpleNamespace

    from kfoundry.evaluate.gpu_lock import ThreadLocks

    spans: dict[int, tuple[float, float]] = {}

    def handler(ref, order):
        begun = time.monotonic()
        time.sleep(0.2)
        spans[order["id"]] = (begun, time.monotonic())
        return {"ok": True}

    monkeypatch.setattr(judge_job, "ORDERS", {"fill": handler, "compare": handler, "inputs": handler})
    sent = []
    channel = SimpleNamespace(send=lambda **message: sent.append(message))
    ref = SimpleNamespace(sets={"0": object()})
    orders = [{"op": "fill", "id": 1, "set": "0"}, {"op": "fill", "id": 2, "set": "0"},
              {"op": "compare", "id": 3, "set": "0"}, {"op": "compare", "id": 4, "set": "0"},
              {"op": "inputs", "id": 5, "set": "0", "mode": "file"}]
    heavy = threading.Lock()
    threads = [threading.Thread(target=judge_job.serve, args=(ref, order, ThreadLocks("judge"), heavy, channel))
               for order in orders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    def overlap(a: int, b: int) -> bool:
        return spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]

    assert overlap(1, 2) and (overlap(1, 3) or overlap(1, 4))
    assert not overlap(3, 4) and not overlap(3, 5) and not overlap(4, 5)
    assert sorted(m["answer"] for m in sent) == [1, 2, 3, 4, 5]
    assert all(m["ok"] and m["serve_s"] >= 0.2 for m in sent)


def test_an_unknown_order_is_answered_with_an_error():
    import threading
    from types import SimpleNamespace

    from kfoundry.evaluate.gpu_lock import ThreadLocks

    sent = []
    judge_job.serve(SimpleNamespace(sets={}), {"op": "steal", "id": 7}, ThreadLocks(), threading.Lock(),
                    SimpleNamespace(send=lambda **message: sent.append(message)))
    assert sent[0]["answer"] == 7 and sent[0]["transport"] and "unknown order" in sent[0]["error"]
