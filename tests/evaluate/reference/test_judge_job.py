"""The judge's own checks on two runs of a candidate (its process is exercised by test_evaluator.py)."""

import pytest
import torch

from kfoundry.evaluate.reference import judge_job
from kfoundry.evaluate.reference.judge_job import _garbage_only


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

    from kfoundry.evaluate.reference.judge_job import _needs_gpu

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

    from kfoundry.evaluate.timing.gpu_lock import ThreadLocks

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

    from kfoundry.evaluate.timing.gpu_lock import ThreadLocks

    sent = []
    judge_job.serve(SimpleNamespace(sets={}), {"op": "steal", "id": 7}, ThreadLocks(), threading.Lock(),
                    SimpleNamespace(send=lambda **message: sent.append(message)))
    assert sent[0]["answer"] == 7 and sent[0]["transport"] and "unknown order" in sent[0]["error"]


def test_a_comparison_fills_the_next_set_after_it(monkeypatch):
    from types import SimpleNamespace

    from kfoundry.evaluate.reference.judge_job import ExpectedSet, _compare

    expected = ExpectedSet("0", 0, [torch.ones(3)], torch.ones(3), None, {}, None)
    ref = SimpleNamespace(get=lambda name: expected, job={"tolerance": 1e-4}, device="cpu")
    monkeypatch.setattr(judge_job, "_open", lambda tree, folder, device: torch.ones(3))
    fills = []

    def fill(ref, order):
        fills.append(order)
        if order["set"] == "bad":
            raise judge_job.transport.TransportError("a buffer does not match its input's shape and dtype")
        return {"ok": True}

    monkeypatch.setattr(judge_job, "_fill", fill)
    plain = _compare(ref, {"set": "0", "folder": "/nowhere", "outputs": {}})
    assert plain["passed"] and "filled" not in plain and not fills
    then = {"set": "1", "buffers": [{"tensor": {}}]}
    answer = _compare(ref, {"set": "0", "folder": "/nowhere", "outputs": {}, "fill": then})
    assert answer["passed"] and answer["filled"] and fills == [then]
    broken = _compare(ref, {"set": "0", "folder": "/nowhere", "outputs": {}, "fill": {"set": "bad"}})
    assert broken["passed"] and "filled" not in broken and "does not match" in broken["fill_error"]


def test_the_parent_passes_a_fill_on_only_for_a_known_set(tmp_path):
    from types import SimpleNamespace

    from kfoundry.evaluate.parent.evaluator import CandidateChecks, Evaluator

    asked = []

    def ask(op, **order):
        asked.append((op, order))
        return {"passed": True, "filled": order.get("fill") is not None, "lock_wait_s": 0.1, "serve_s": 0.2}

    owner = SimpleNamespace(prepared=SimpleNamespace(names=["0", "1"]), judge=SimpleNamespace(ask=ask),
                            transport="ipc", progress=lambda message: None)
    checks = CandidateChecks()
    reply = Evaluator._serve(owner, {"request": "check", "label": "trial 0", "set": "0", "outputs": {},
                                     "fill": {"set": "1", "buffers": []}}, tmp_path, checks)
    assert reply == {"ok": True, "filled": True} and asked[-1][1]["fill"] == {"set": "1", "buffers": []}
    assert checks.answers["trial 0"] == {"passed": True}
    checks.timed({"serve_parts": {"compare": 0.25, "open": 0.5}})
    checks.timed({"serve_parts": {"compare": 0.5}})
    assert checks.judge_seconds["judge_compare_s"] == 0.75 and checks.judge_seconds["judge_open_s"] == 0.5
    refused = Evaluator._serve(owner, {"request": "check", "label": "trial 1", "set": "0", "outputs": {},
                                       "fill": {"set": "../../etc"}}, tmp_path, checks)
    assert "error" in refused and len(asked) == 1
    # a failed trial stops the worker: no inputs come with the answer
    asked.clear()
    owner.judge = SimpleNamespace(ask=lambda op, **order: {"passed": False, "filled": True})
    stopped = Evaluator._serve(owner, {"request": "check", "label": "trial 2", "set": "0", "outputs": {},
                                       "fill": {"set": "1"}}, tmp_path, checks)
    assert stopped.get("stop") and "filled" not in stopped


def test_a_comparison_says_where_its_serving_went(monkeypatch):
    from types import SimpleNamespace

    from kfoundry.evaluate.reference.judge_job import ExpectedSet, _compare

    expected = ExpectedSet("0", 0, [torch.ones(3)], torch.ones(3), None, {}, None)
    ref = SimpleNamespace(get=lambda name: expected, job={"tolerance": 1e-4}, device="cpu")
    monkeypatch.setattr(judge_job, "_open", lambda tree, folder, device: torch.ones(3))
    answer = _compare(ref, {"set": "0", "folder": "/nowhere", "outputs": {}, "inputs": {}, "repeat": {}})
    assert answer["passed"] and answer["changed_input"] is None and answer["repeat"] is None
    parts = answer["serve_parts"]
    assert set(parts) == {"open", "inputs", "compare", "repeat"} and all(v >= 0 for v in parts.values())


DOUBLE_SUM = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x.double().sum(dim=1).float() * SCALE
"""


@pytest.mark.parametrize("tier", ["resident", "per-set"])
def test_the_truth_arbitrates_the_same_in_every_tier(tmp_path, problems_dir, tier):
    """At a tolerance the float32 reference itself misses (1e-9 on sums of 65536 numbers), a sum taken in
    float64 passes only through the float64 truth, and one 1e-4 off fails against it: in the one-set tier
    the truth is made when that comparison asks for it, with the same figures."""
    from kfoundry.evaluate import EvalOptions, Evaluator

    exact, off = tmp_path / "exact.py", tmp_path / "off.py"
    exact.write_text(DOUBLE_SUM.replace("SCALE", "1.0"))
    off.write_text(DOUBLE_SUM.replace("SCALE", "(1 + 1e-4)"))
    options = EvalOptions(device="cpu", trials=2, guard=False, tolerance=1e-9, memory_tier=tier, seed=1)
    with Evaluator(problems_dir / "row_sum.py", options) as evaluator:
        good, bad = evaluator.evaluate(exact), evaluator.evaluate(off)
        assert evaluator.plan.tier == tier.replace("-", "_")
    assert good.status == "ok", good.message
    assert any("as close to the float64 truth" in w for w in good.warnings)
    assert good.correctness.ground_truth == "float64"
    assert bad.status == "wrong_output" and "against the float64 truth" in bad.message
    assert bad.correctness.error_ratio_candidate > 2 * bad.correctness.error_ratio_reference


@pytest.mark.gpu
@pytest.mark.parametrize("tier", ["resident", "host", "per-set"])
def test_every_tier_judges_on_the_gpu(tmp_path, examples_dir, tier):
    """Each tier forced on a GPU: the example's kernel is ok, its verdict and figures the same."""
    from kfoundry.evaluate import EvalOptions, Evaluator

    example = examples_dir / "row_softmax"
    options = EvalOptions(device="cuda", trials=3, memory_tier=tier, baselines=("eager",), seed=1)
    with Evaluator(example / "problem.py", options) as evaluator:
        evaluation = evaluator.evaluate(example / "kernel.py")
        assert evaluator.plan.tier == tier.replace("-", "_")
    assert evaluation.status == "ok", evaluation.message
    assert evaluation.settings["memory"]["tier"] == tier.replace("-", "_")
