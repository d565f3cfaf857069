"""The roofline estimate at the problem file's own sizes: FLOPs and bytes counted on the meta device, the bound
and the floor on the target GPU at the precision the tolerance needs."""

from pathlib import Path

import pytest

from kfoundry.experts.roofline_text import estimate
from kfoundry.types import DeviceFacts

ROOT = Path(__file__).resolve().parents[2]
GPU = DeviceFacts(kind="target", name="NVIDIA H100 SXM", peak_bandwidth_gbs=3350.0,
                  peak_tflops={"fp32": 67.0, "tf32": 495.0, "fp16": 990.0, "bf16": 990.0}, source="datasheet")
LINEAR = '''import torch
from torch import nn

rows = {m}
depth = 4096
columns = 2048


class Model(nn.Module):
    """A product by a learned matrix, then tanh."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(depth, columns) / depth ** 0.5)

    def forward(self, a):
        return torch.tanh(a @ self.weight)


def get_inputs():
    return [torch.randn(rows, depth)]


def get_init_inputs():
    return []
'''


def _write(tmp_path, text, name="problem.py"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_large_gemm_is_compute_bound_at_three_fp16_passes(tmp_path):
    m, k, n = 8192, 4096, 2048
    found = estimate(_write(tmp_path, LINEAR.format(m=m)), "fp32", 1e-4, GPU)
    assert found.flops == 2 * m * k * n
    assert found.moved == 4 * (m * k + k * n + m * n)  # input, weight and output once each
    assert found.bound == "compute" and found.roof == "3xFP16"
    assert found.compute_ms == pytest.approx(2 * m * k * n / (990e12 / 3) * 1e3)
    assert found.memory_ms == pytest.approx(found.moved / 3350e9 * 1e3)
    line = found.line()
    assert line.startswith("Roofline estimate: 137.4 GFLOP and ") and "compute-bound on NVIDIA H100 SXM" in line
    assert "at the problem file's own sizes" in line and "not timed" in line
    loose = estimate(_write(tmp_path, LINEAR.format(m=m)), "fp32", 1e-2, GPU)
    assert loose.roof == "FP16" and loose.compute_ms == pytest.approx(found.compute_ms / 3)
    half = estimate(_write(tmp_path, LINEAR.format(m=m)), "fp16", 1e-2, GPU)
    assert half.moved == found.moved // 2 and half.roof == "FP16"


def test_a_skinny_gemm_is_memory_bound(tmp_path):
    found = estimate(_write(tmp_path, LINEAR.format(m=1)), "fp32", 1e-4, GPU)
    assert found.bound == "memory" and found.floor_ms == found.memory_ms and "memory-bound" in found.line()


def test_a_nine_gigabyte_problem_costs_nothing_and_data_dependent_code_gets_no_estimate(tmp_path):
    huge = estimate(_write(tmp_path, LINEAR.format(m=1 << 20)), "fp32", 1e-4, GPU)  # 16 GiB of input
    assert huge.moved > 9e9
    branching = LINEAR.format(m=4).replace("return torch.tanh(a @ self.weight)",
                                           "return a @ self.weight if a.sum() > 0 else -a")
    assert estimate(_write(tmp_path, branching, "branch.py"), "fp32", 1e-4, GPU) is None
    assert estimate(tmp_path / "missing.py", "fp32", 1e-4, GPU) is None


def test_without_peaks_there_is_no_floor_but_still_the_work(tmp_path):
    found = estimate(_write(tmp_path, LINEAR.format(m=64)), "fp32", 1e-4, None)
    assert found.bound is None and found.flops and "no floor on the target GPU" in found.line()
    conv = estimate(ROOT / "benchmarks" / "conv_suite" / "14_conv2d_groupnorm_scale_maxpool_clamp.py", "fp32", 1e-4,
                    GPU)
    assert conv.flops and conv.bound == "compute"
