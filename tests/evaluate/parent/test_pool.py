"""Several evaluation workers on one machine: --devices specs, and two CPU workers judging candidates
sent from several threads at once."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from kfoundry.errors import UsageError
from kfoundry.evaluate import EvalOptions
from kfoundry.evaluate.parent import pool as pool_module
from kfoundry.evaluate.parent.pool import DeviceSlots, EvaluatorPool, parse_devices, pool_device


@pytest.fixture
def two_gpus(monkeypatch):
    monkeypatch.setattr(pool_module, "_cuda_count", lambda: 2)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(pool_module, "_cuda_count", lambda: 0)


@pytest.mark.parametrize("spec, devices", [
    (None, ["cpu"]), ("auto", ["cpu"]), ("cpu", ["cpu"]), ("cpu:2", ["cpu", "cpu"]), ("cpu,cpu", ["cpu", "cpu"]),
    (" CPU:3 ", ["cpu"] * 3),
])
def test_cpu_specs(no_gpu, spec, devices):
    assert parse_devices(spec) == devices


@pytest.mark.parametrize("spec, devices", [
    (None, ["cuda:0"]), ("all", ["cuda:0", "cuda:1"]), ("cuda:0,cuda:1", ["cuda:0", "cuda:1"]),
    ("cuda:1", ["cuda:1"]), ("1,0", ["cuda:1", "cuda:0"]), ("cuda", ["cuda:0"]),
])
def test_gpu_specs(two_gpus, spec, devices):
    assert parse_devices(spec) == devices


@pytest.mark.parametrize("spec, says", [
    ("cuda:2", "this machine has 2 CUDA device(s)"), ("cuda:0,cuda:0", "cuda:0 listed twice"),
    ("cpu,cuda:0", "do not mix"), ("all,cuda:0", "'all' stands alone"), ("cpu:0", "positive number"),
    ("cpu:two", "positive number"), ("gpu0", "unknown device 'gpu0'"), ("cuda:x", "not a GPU"),
    ("cpu,,cpu", "empty entry"),
])
def test_bad_specs_say_what_is_wrong(two_gpus, spec, says):
    with pytest.raises(UsageError, match="--devices") as caught:
        parse_devices(spec)
    assert says in str(caught.value)


@pytest.mark.parametrize("spec", ["all", "cuda:0", "0"])
def test_gpu_specs_without_a_gpu(no_gpu, spec):
    with pytest.raises(UsageError, match="no CUDA GPU"):
        parse_devices(spec)


def test_pool_device_tells_cpu_from_gpu():
    assert pool_device(["cpu", "cpu"]) == "cpu"
    assert pool_device(["cuda:1"]) == "cuda:1"
    assert pool_device(["cuda:0", "cuda:1"]) == "cuda"


def test_device_slots_hand_each_device_to_one_job_at_a_time():
    slots = DeviceSlots(["cuda:0", "cuda:1"])
    with slots.lease() as first, slots.lease() as second:
        assert {first, second} == {"cuda:0", "cuda:1"}
    with slots.lease() as again:
        assert again in ("cuda:0", "cuda:1")


EXPECTED = {"affine_ok.py": "ok", "wrong_constant.py": "wrong_output", "syntax_error.py": "compile_error",
            "bad_mask.py": "wrong_output"}


def test_two_cpu_workers_share_the_candidates(problems_dir, candidates_dir):
    options = EvalOptions(device="cpu", trials=1, timeout_s=120)
    with EvaluatorPool(problems_dir / "affine.py", options, "cpu:2") as pool:
        assert pool.device == "cpu" and pool.devices == ["cpu", "cpu"] and pool.source.name == "affine"
        assert pool.evaluators[0].trial_seeds == pool.evaluators[1].trial_seeds  # one seed for all workers
        prepared = pool.prepare()
        assert prepared.device_facts.kind == "cpu"
        active, most, lock = [0, 0], [0], threading.Lock()

        def counted(index, evaluate):
            def run(candidate):
                with lock:
                    active[index] += 1
                    assert active[index] == 1, "two candidates at once on one worker"
                    most[0] = max(most[0], sum(active))
                try:
                    return evaluate(candidate)
                finally:
                    with lock:
                        active[index] -= 1
            return run

        for index, evaluator in enumerate(pool.evaluators):
            evaluator.evaluate = counted(index, evaluator.evaluate)
        names = list(EXPECTED)
        with ThreadPoolExecutor(len(names)) as executor:
            evaluations = list(executor.map(pool.evaluate, [candidates_dir / name for name in names]))
    for name, evaluation in zip(names, evaluations):
        assert evaluation.status == EXPECTED[name], (name, evaluation.message)
        assert evaluation.candidate == str((candidates_dir / name).resolve()) and evaluation.device == "cpu"
    assert {e.settings["worker"]["index"] for e in evaluations} == {0, 1}
    assert most[0] == 2
