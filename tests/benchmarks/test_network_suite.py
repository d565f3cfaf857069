"""benchmarks/network_suite: every problem loads through kfoundry.problem and runs its forward, deterministically, at
run.py's small sizes on the CPU; run.py's reading of a candidate (kernels, launch sites) and its --merge table.
Nothing is composed or timed here. The GPU figures in the merge test are FAKE: made up, not measured."""

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.benchmarks.small_runs import check_runs_at_small_sizes

REPO = Path(__file__).resolve().parent.parent.parent
SUITE = REPO / "benchmarks" / "network_suite"


@pytest.fixture(scope="module")
def run_script():
    spec = importlib.util.spec_from_file_location("network_suite_run_under_test", SUITE / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_twelve_problems_each_with_small_sizes(run_script):
    numbers = [number for number, _ in run_script.problems()]
    assert numbers == list(range(1, 13))
    assert set(run_script.SMALL) == set(numbers)


@pytest.mark.parametrize("number", range(1, 13))
def test_the_problem_runs_at_small_sizes_and_is_deterministic(run_script, number):
    check_runs_at_small_sizes(dict(run_script.problems())[number], run_script.SMALL[number], 10)


CANDIDATE = '''
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _a_kernel(x):
    pass


@triton.jit
def _b_kernel(x):
    pass


@triton.jit
def _unused_kernel(x):
    pass


def _helper(t):
    _a_kernel[(1,)](t)


class ModelNew(nn.Module):
    def forward(self, x):
        _helper(x)
        for stage in range(2):
            _b_kernel[(1,)](x)
        return self._tail(x)

    def _tail(self, x):
        _helper(x)
        return x
'''


def test_source_facts_count_kernels_and_the_launch_sites_forward_reaches(run_script):
    facts = run_script.source_facts(CANDIDATE)
    assert facts == {"kernels": 3, "kernels_launched": 2, "launch_sites": 2, "launch_sites_in_loops": 1}


def test_merge_joins_gpu_times_with_compose_facts(run_script):
    compose = {"problems": [{"number": 1, "name": "1_a", "composed": True, "kernels": 5, "launch_sites": 9,
                             "launch": {"launches": 12}},
                            {"number": 2, "name": "2_b", "composed": False, "kernels": None, "launch_sites": None}]}
    gpu = {"problems": [{"name": "1_a", "status": "ok", "eager_ms": 2.0, "compile_ms": 1.0, "ours_ms": 1.5,
                         "speedup_eager": 1.333, "speedup_compile": 0.667, "reduce_overhead_ms": 1.2,
                         "speedup_reduce_overhead": 0.8, "graph_replays": 3}]}
    rows = run_script.merge(gpu, compose)
    assert rows[0]["launches"] == 12 and rows[0]["ours_ms"] == 1.5 and rows[1]["status"] is None
    assert rows[0]["graph"] and rows[0]["speedup_reduce_overhead"] == 0.8
    text = "\n".join(run_script.merged_lines(rows))
    assert "1_a" in text and "0.667x" in text and "0.800x" in text and "2_b" in text
