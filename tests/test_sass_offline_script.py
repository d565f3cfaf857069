"""benchmarks/sass_offline.py on the CPU: a candidate's kernels compiled for sm_90 without a GPU, the host code
on its GPU path, loops found in the machine code, and a forward that stops on a value no kernel wrote."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "benchmarks" / "sass_offline.py"

PROBLEM = '''import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        return x.sum(dim=1)


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
'''

CANDIDATE = '''import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _row_sum_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


@triton.jit
def _cpu_only_kernel(x_ptr):
    pass


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
        if x.is_cuda:
            _row_sum_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=128, num_warps=4)
        else:
            _cpu_only_kernel[(1,)](x)
        TAIL
        return out
'''


def _run(tmp_path, tail: str = "pass", *extra: str):
    problem, candidate = tmp_path / "problem.py", tmp_path / "candidate.py"
    problem.write_text(PROBLEM)
    candidate.write_text(CANDIDATE.replace("TAIL", tail))
    out = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, str(SCRIPT), str(problem), str(candidate), "--json", str(out), *extra],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout, json.loads(out.read_text())


def test_the_gpu_path_s_kernel_compiled_for_sm_90(tmp_path):
    stdout, record = _run(tmp_path, "pass", "--dump", str(tmp_path / "dump"))
    assert record["arch"] == 90 and record["forward_failure"] is None
    (row,) = record["kernels"]  # the `.is_cuda` branch: the CPU-only kernel is never launched
    assert row["kernel"] == "_row_sum_kernel" and row["constants"]["BLOCK"] == 128
    assert row["options"] == {"num_warps": 4}
    assert row["registers"] > 0 and row["local_bytes"] == 0 and row["instructions"] > 20
    (loop,) = row["loops"]  # the loop over the columns, in the machine code
    assert 1 < loop["instructions"] < row["instructions"] and loop["kinds"].get("LDG", 0) >= 1
    assert "_row_sum_kernel" in stdout and "loops:" in stdout
    assert sorted(p.suffix for p in (tmp_path / "dump").iterdir()) == [".sass", ".ttgir"]


def test_a_forward_that_fails_on_what_it_read_back_stops_there(tmp_path):
    # the host code reads a result no kernel wrote (nothing runs) and fails on it
    stdout, record = _run(tmp_path, "if float(out.abs().max()) >= 0 or True:\n            raise ValueError('read back')")
    assert [row["kernel"] for row in record["kernels"]] == ["_row_sum_kernel"]  # launched before the stop
    assert record["forward_failure"] == "ValueError: read back" and "the forward stopped" in stdout
