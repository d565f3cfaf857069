"""kfoundry.evaluate.parent.memory_plan: sizes from the meta device, the plan and its refusal, and the plan's
prediction against the peak an evaluator really reaches (its processes' private memory and files)."""

import json
import os
import subprocess
import sys

import pytest

from kfoundry.errors import ProblemError
from kfoundry.evaluate import EvalOptions, Evaluator
from kfoundry.evaluate.parent.host_memory import MemorySampler
from kfoundry.evaluate.parent.memory_plan import ProblemSizes, is_too_large, plan, problem_sizes
from kfoundry.problem import read_problem

GB = 1e9

POINTWISE = """import torch
import torch.nn as nn

batch_size = 1000
dim = 10000


class Model(nn.Module):
    def forward(self, x):
        return torch.sin(x) * 2.0 + 0.5


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
"""


def test_sizes_come_from_the_meta_device_at_the_set_values(problems_dir):
    sizes = problem_sizes(read_problem(problems_dir / "affine.py", {"batch_size": 1000, "dim": 1000}), "fp32", False)
    assert (sizes.input_bytes, sizes.output_bytes, sizes.truth_bytes, sizes.param_bytes) == (4e6, 4e6, 8e6, 0)
    assert sizes.held_truth_bytes == 4e6  # a float32 output's truth is kept as a float32 correction
    half = problem_sizes(read_problem(problems_dir / "affine.py", {"batch_size": 1000, "dim": 1000}), "fp16", False)
    assert (half.output_bytes, half.truth_bytes, half.held_truth_bytes) == (2e6, 8e6, 4e6)
    assert sizes.forward_bytes >= sizes.output_bytes
    # far beyond this machine, and still instant: nothing is allocated
    huge = problem_sizes(read_problem(problems_dir / "affine.py", {"batch_size": 200_000, "dim": 100_000}),
                         "fp32", False)
    assert huge.input_bytes == 80e9


def test_a_problem_beyond_the_machine_is_refused_with_the_figures(problems_dir):
    options = EvalOptions(device="cpu", set_values={"batch_size": 200_000, "dim": 100_000})
    with Evaluator(problems_dir / "affine.py", options) as evaluator:
        with pytest.raises(ProblemError) as raised:
            evaluator.prepare()
        assert evaluator.judge is None  # refused before any process started
    message = str(raised.value)
    assert is_too_large(raised.value)
    assert "GB of host memory" in message and "GB available, from" in message
    assert "--set" in message and "--trials" in message and "inputs 80.00 GB" in message


def test_the_memory_limit_overrides_what_is_free_and_is_named(problems_dir):
    options = EvalOptions(device="cpu", set_values={"batch_size": 4000, "dim": 10000},
                          memory_limit_bytes=int(0.5 * GB))
    with Evaluator(problems_dir / "affine.py", options) as evaluator, pytest.raises(ProblemError) as raised:
        evaluator.prepare()
    assert "0.5 GB available, from --memory-limit" in str(raised.value)


def test_a_short_gpu_goes_down_the_tiers_before_it_refuses():
    """The same problem on ever smaller GPUs: every set kept on the device (fewer workers, then the
    baselines before the candidates), then one set at a time with the truth on the device, then the
    expected outputs in host memory (no set computed while serving), then one set at a time with the truth
    on the host, then none; then a refusal that names that last plan."""
    sizes = ProblemSizes(input_bytes=int(0.3 * GB), output_bytes=int(2 * GB), truth_bytes=int(4 * GB),
                         held_truth_bytes=int(2 * GB), param_bytes=0, forward_bytes=int(4 * GB),
                         truth_forward_bytes=int(8 * GB))

    def chosen(free, host=100):
        p = plan(sizes, "cuda:0", 7, int(host * GB), "test", gpu_free=int(free * GB), workers=6)
        assert p.gpu_bytes <= 0.9 * free * GB and p.host_bytes <= 0.85 * host * GB
        return p.tier, p.truth, p.workers, p.baselines_first

    assert chosen(200) == ("resident", "device", 6, False)
    assert chosen(100)[:2] == ("resident", "device") and chosen(100)[2] < 6  # fewer candidates at once
    assert chosen(60) == ("resident", "device", 1, True)  # one worker, the baselines timed before it
    assert chosen(40)[:2] == ("per_set", "device")
    assert chosen(30)[:2] == ("host", "device")  # the expected outputs in host memory (7 x 4 GB)
    # a host too small for them: the truth on the host, then none
    tiers = [chosen(free, host=30)[:2] for free in (30, 26)]
    assert tiers == [("per_set", "host"), ("per_set", "none")], tiers
    with pytest.raises(ProblemError) as refused:
        plan(sizes, "cuda:0", 7, int(30 * GB), "test", gpu_free=int(15 * GB), workers=6)
    message = str(refused.value)
    assert is_too_large(refused.value)
    assert "one set at a time" in message and "no float64 truth" in message and "GB of GPU memory while" in message
    # the prediction does not grow with the trials where sets are computed when needed
    cpu = [plan(sizes, "cpu", sets, int(100 * GB), "test").host_bytes for sets in (3, 7, 12)]
    assert cpu[0] == cpu[1] == cpu[2]


def test_the_host_tier_counts_every_sets_expected_outputs_in_host_memory():
    sizes = ProblemSizes(input_bytes=int(6.4 * GB), output_bytes=int(6.4 * GB), truth_bytes=int(12.9 * GB),
                         held_truth_bytes=int(6.4 * GB), param_bytes=0, forward_bytes=int(6.4 * GB),
                         truth_forward_bytes=int(12.9 * GB))
    kept = plan(sizes, "cuda:0", 7, int(200 * GB), "test", gpu_free=int(140 * GB), tier="host")
    assert kept.host_terms["expected outputs kept on the host"] == 7 * int(12.8 * GB)
    # one set at a time goes first where it fits: its sets are computed again in milliseconds on a GPU
    assert plan(sizes, "cuda:0", 7, int(200 * GB), "test", gpu_free=int(140 * GB)).tier == "per_set"
    # without the host memory for them, never the host tier
    with pytest.raises(ProblemError, match="GB of host memory"):
        plan(sizes, "cuda:0", 7, int(60 * GB), "test", gpu_free=int(140 * GB), tier="host")


def test_a_forced_tier_is_kept_or_refused_with_its_name():
    sizes = ProblemSizes(input_bytes=int(1 * GB), output_bytes=int(1 * GB), truth_bytes=int(2 * GB),
                         held_truth_bytes=int(1 * GB), param_bytes=0, forward_bytes=int(1 * GB))
    assert plan(sizes, "cuda:0", 7, int(100 * GB), "test", gpu_free=int(140 * GB), tier="per_set").tier == "per_set"
    with pytest.raises(ProblemError, match="every set's expected outputs kept on the device"):
        plan(sizes, "cuda:0", 7, int(100 * GB), "test", gpu_free=int(20 * GB), tier="resident")
    with pytest.raises(ProblemError, match="on the CPU use resident or per-set"):
        plan(sizes, "cpu", 7, int(100 * GB), "test", tier="host")
    # on the CPU a forced resident tier is kept where the host holds it, small or not
    assert plan(sizes, "cpu", 7, int(100 * GB), "test", tier="resident").tier == "resident"
    assert plan(sizes, "cpu", 7, int(100 * GB), "test").tier == "per_set"


def test_the_gpu_phases_follow_the_baselines_and_the_truth():
    sizes = ProblemSizes(input_bytes=int(1 * GB), output_bytes=int(1 * GB), truth_bytes=int(2 * GB),
                         held_truth_bytes=int(1 * GB), param_bytes=0, forward_bytes=int(2 * GB),
                         truth_forward_bytes=int(4 * GB))
    beside = plan(sizes, "cuda:0", 7, int(100 * GB), "test", gpu_free=None, workers=2, tier="per_set", first=False)
    before = plan(sizes, "cuda:0", 7, int(100 * GB), "test", gpu_free=None, workers=2, tier="per_set", first=True)
    assert set(beside.gpu_phases) == {"prepare", "serving"} and "baselines" in beside.gpu_phases["serving"]
    assert set(before.gpu_phases) == {"prepare", "baselines", "serving"}
    assert "baselines" not in before.gpu_phases["serving"] and before.gpu_bytes < beside.gpu_bytes
    # the float64 forward on the device is counted where the one-set tier makes a truth while serving
    on_host = plan(sizes, "cuda:0", 7, int(100 * GB), "test", workers=2, tier="per_set", truth="host", first=False)
    assert beside.gpu_phases["serving"]["judge"] - on_host.gpu_phases["serving"]["judge"] > 0
    assert "the float64 truth on the host" in on_host.host_terms


def test_the_float64_forward_is_sized_on_the_meta_device(problems_dir):
    sizes = problem_sizes(read_problem(problems_dir / "affine.py", {"batch_size": 1000, "dim": 1000}), "fp32", False)
    assert sizes.truth_forward_bytes >= sizes.truth_bytes == 8e6
    assert sizes.truth_forward_bytes >= 2 * sizes.output_bytes


RUN = """
import json, sys
from kfoundry.evaluate import EvalOptions, Evaluator
with Evaluator(sys.argv[1], EvalOptions(device="cpu", trials=2, guard=False)) as evaluator:
    evaluation = evaluator.evaluate(sys.argv[2])
    print(json.dumps({"status": evaluation.status, "message": evaluation.message,
                      "predicted": evaluator.plan.host_bytes, "terms": evaluator.plan.host_terms}))
"""


def test_the_prediction_is_within_a_quarter_of_the_measured_peak(tmp_path):
    """A problem whose data outweigh the processes (40 MB in, 40 MB out, 80 MB of float64 truth),
    judged against itself (no guard, no Triton: the memory of the harness, not of a kernel). The
    evaluator runs in a process of its own, so that only its judge and workers (and their folders,
    under a work dir of their own) are measured, not the suite's other evaluators."""
    problem = tmp_path / "pointwise.py"
    problem.write_text(POINTWISE)
    candidate = tmp_path / "same.py"
    candidate.write_text(POINTWISE + "\nModelNew = Model\n")
    work = tmp_path / "work"
    env = {**os.environ, "KFOUNDRY_WORK_DIR": str(work)}
    peak = MemorySampler(interval_s=0.02)
    peak.watch_prefix(work, "kfoundry-")
    with peak:
        runner = subprocess.Popen([sys.executable, "-c", RUN, str(problem), str(candidate)], env=env,
                                  stdout=subprocess.PIPE, text=True)
        peak.watch_children(runner.pid)
        out, _ = runner.communicate(timeout=300)
    record = json.loads(out.strip().splitlines()[-1])
    assert record["status"] == "ok", record["message"]
    ratio = peak.peak / record["predicted"]
    print(f"measured {peak.peak / GB:.3f} GB, predicted {record['predicted'] / GB:.3f} GB")
    assert 0.75 <= ratio <= 1.25, (peak.peak / GB, record["predicted"] / GB, record["terms"])
