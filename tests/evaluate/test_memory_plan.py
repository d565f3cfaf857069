"""kfoundry.evaluate.memory_plan: sizes from the meta device, the plan and its refusal, and the plan's
prediction against the peak an evaluator really reaches (its processes' private memory and files)."""

import json
import os
import subprocess
import sys

import pytest

from kfoundry.errors import ProblemError
from kfoundry.evaluate import EvalOptions, Evaluator
from kfoundry.evaluate.host_memory import MemorySampler
from kfoundry.evaluate.memory_plan import ProblemSizes, is_too_large, plan, problem_sizes
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


def test_a_short_gpu_gets_fewer_workers_and_then_sets_computed_when_needed():
    sizes = ProblemSizes(input_bytes=int(0.3 * GB), output_bytes=int(2 * GB), truth_bytes=int(4 * GB),
                         held_truth_bytes=int(2 * GB), param_bytes=0, forward_bytes=int(4 * GB))
    roomy = plan(sizes, "cuda:0", 7, int(100 * GB), "test", gpu_free=int(200 * GB), workers=6)
    assert roomy.resident and roomy.workers == 6 and roomy.transport == "ipc"
    short = plan(sizes, "cuda:0", 7, int(100 * GB), "test", gpu_free=int(100 * GB), workers=6)
    assert short.resident and short.workers < 6  # the sets stay kept; fewer candidates at once
    tight = plan(sizes, "cuda:0", 7, int(100 * GB), "test", gpu_free=int(60 * GB), workers=6)
    assert not tight.resident and tight.gpu_bytes <= 0.9 * 60 * GB
    with pytest.raises(ProblemError, match="GB of GPU memory"):
        plan(sizes, "cuda:0", 7, int(100 * GB), "test", gpu_free=int(5 * GB), workers=6)
    # the prediction does not grow with the trials where sets are computed when needed
    cpu = [plan(sizes, "cpu", sets, int(100 * GB), "test").host_bytes for sets in (3, 7, 12)]
    assert cpu[0] == cpu[1] == cpu[2]


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
