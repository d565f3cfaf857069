"""The device-limits estimate: calibrated against Triton's own OutOfResources figures, and every template's
configurations fitted to the target GPU (shared memory, registers, threads)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kfoundry.evaluate.shared.device_facts import target_facts
from kfoundry.experts.composer.compose import compose
from kfoundry.experts.composer.templates import (conv, device_limits, gemm, moments, pointwise, pool, recurrent,
                                                  reduction, scan)
from kfoundry.experts.composer.templates.device_limits import (
    DEFAULT_LIMITS,
    RESERVE,
    DeviceLimits,
    DoesNotFit,
    check,
    composer_dot_need,
    dot_need,
    fit_configs,
    kernel_target,
    limits_of,
    tile_need,
)
from kfoundry.types import DeviceFacts

ROOT = Path(__file__).resolve().parents[4]
COMPOSE = sys.modules["kfoundry.experts.composer.compose"]
TEMPLATES = (conv, gemm, moments, pointwise, pool, recurrent, reduction, scan)
H200, H100, A100, RTX4090 = (target_facts(n) for n in ("H200", "H100", "A100", "RTX 4090"))
H200_LIMIT = 232448  # "Hardware limit" in Triton's message on the H200


def dot(bm, bn, bk, warps, stages, precision):
    return composer_dot_need({"BM": bm, "BN": bn, "BK": bk, "num_warps": warps, "num_stages": stages,
                              "precision": precision})


# Triton 3.6 on an H200: "out of resource: shared memory, Required: N" (benchmarks/results, see the module)
ASKED = [
    (dot(128, 128, 64, 8, 4, "fp16x3"), 262144),
    (dot(128, 256, 64, 8, 3, "fp16x3"), 294912),
    (dot(256, 128, 64, 8, 3, "fp16x3"), 294912),
    (dot(64, 256, 64, 8, 3, "fp16x3"), 249856),
    (dot(256, 64, 64, 8, 4, "tf32"), 327680),  # a tuner child of a conv reduced over its 64 channels
    # the outer-product conv of ghost_replay's deep_pool (its candidate named for the GEMM's tf32x3)
    (composer_dot_need({"BM": 1024, "BN": 64, "BK": 16, "num_warps": 8, "num_stages": 2, "precision": "default",
                        "layout": "fma"}, k_step=1), 262144),
]
# compiled and ran on the same H200 (benchmarks/results/gemm_precisions-h200-20261203c-chunks-split-tiles.json and
# benchmarks/results/archive/gemm_precisions-h200-20261203{a,b-chunks}.json)
RAN = [dot(128, 128, 64, 8, 3, "fp16x3"), dot(128, 128, 32, 8, 4, "fp16x3"), dot(64, 128, 64, 4, 4, "fp16x3"),
       dot(128, 64, 64, 4, 4, "fp16x3"), dot(128, 128, 64, 8, 3, "tf32x3"), dot(128, 128, 32, 8, 3, "tf32x3"),
       dot(128, 64, 32, 4, 4, "tf32x3")]


@pytest.mark.parametrize("need, required", ASKED)
def test_estimate_covers_what_triton_asked_within_the_reserve(need, required):
    assert required <= need.shared_bytes <= required + RESERVE
    fit = check(need, H200)
    assert not fit and "shared memory" in fit.message() and str(H200_LIMIT) in fit.message()


@pytest.mark.parametrize("need", RAN)
def test_configs_that_ran_on_the_h200_fit(need):
    assert check(need, H200), check(need, H200).message()


def test_terms_of_the_estimate():
    need = dot_need(128, 64, 32, num_warps=4, num_stages=3)
    assert need.pipeline_bytes == 3 * (128 * 32 + 32 * 64) * 4 == 73728
    assert need.epilogue_bytes == 128 * 64 * 4
    assert need.shared_bytes == 73728 + RESERVE and need.threads == 128
    # 64 accumulator values a thread, fragments of a k-slice of 16: (128 + 64) * 16 / 128 = 24, and the overhead
    assert need.registers == 64 + 24 + device_limits.REGISTER_OVERHEAD


def test_registers_and_threads():
    spills = check(dot_need(128, 128, 64, num_warps=4, num_stages=3, element_bytes=2, a_copies=2, b_copies=2,
                            accumulators=3), H200)  # the fp16x3 tile that ran 2.3x slower with 4 warps
    assert not spills and spills.reasons[0].startswith("registers")
    assert limits_of(H200).register_limit(512) == 128  # 65536 a block over 512 threads
    too_many = check(tile_need(1024, num_warps=64), H200)
    assert not too_many and "threads: 2048" in too_many.message()


def test_limits_of_devices():
    # no device named: the GPU a prompt assumes then (an H100)
    assert limits_of(None) == DEFAULT_LIMITS and DEFAULT_LIMITS.shared_memory_per_block == limits_of(H100).shared_memory_per_block
    assert limits_of(H200).shared_memory_per_block == H200_LIMIT
    assert limits_of(A100).shared_memory_per_block == 163 * 1024
    assert limits_of(RTX4090).shared_memory_per_block == 99 * 1024
    assert limits_of(DeviceFacts(kind="cuda", name="NVIDIA H200")).shared_memory_per_block == H200_LIMIT  # table
    assert limits_of(DeviceFacts(kind="cpu", name="a CPU")) == DEFAULT_LIMITS
    assert limits_of(DeviceFacts(kind="cuda", name="unknown GPU")) == DEFAULT_LIMITS
    assert limits_of(None) == DEFAULT_LIMITS
    cpu = DeviceFacts(kind="cpu", name="a CPU")
    assert kernel_target(cpu) is None and kernel_target(cpu, "h100").name == "NVIDIA H100 SXM"
    assert kernel_target(H200, "rtx 4090") is H200  # a GPU run: the GPU it runs on


def test_shrinks_stages_first_then_tiles_and_drops_what_cannot_fit():
    small = DeviceLimits("small", 80 * 1024)
    need = lambda c: composer_dot_need(c)  # noqa: E731
    big = {"BM": 128, "BN": 128, "BK": 64, "num_warps": 8, "num_stages": 4, "precision": "tf32"}
    assert device_limits.fit_config(big, need, small) == dict(big, num_stages=2, BK=32)  # 64 KiB + the reserve
    # the epilogue binds (a 256 x 128 accumulator is 128 KiB): the tile shrinks, not the pipeline
    wide = {"BM": 256, "BN": 128, "BK": 32, "num_warps": 8, "num_stages": 2, "precision": "tf32"}
    assert device_limits.fit_config(wide, need, DeviceLimits("99", 99 * 1024)) == dict(wide, BM=128)
    assert fit_configs([big, dict(big, num_stages=3)], need, small) == [dict(big, num_stages=2, BK=32)]
    # a tile spanning all of 8192 output features cannot shrink along them
    full = {"BM": 16, "BN": "full", "BK": 16, "num_warps": 4, "num_stages": 2, "precision": "tf32"}
    with pytest.raises(DoesNotFit, match="no tile configuration fits small"):
        fit_configs([full], lambda c: composer_dot_need(c, n_full=8192), small)


def _groups(problem: str | Path, **kwargs) -> list:
    found = []

    def spy(group, *args, **kw):
        found.append(group)
        return original(group, *args, **kw)
    original = COMPOSE.group_configs
    COMPOSE.group_configs = spy
    try:
        result = compose(problem, max_variants=1, **kwargs)
    finally:
        COMPOSE.group_configs = original
    assert result.candidates, result.message
    first: dict[str, object] = {}  # a kernel the plans share, once (the first plan's)
    for group in found:
        first.setdefault(group.name, group)
    return list(first.values())


STEM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 64, kernel_size=3, padding=1)

    def forward(self, x):
        return torch.relu(self.stem(x))


def get_inputs():
    return [torch.randn(32, 3, 112, 112)]


def get_init_inputs():
    return []
"""


def test_the_conv_tile_that_asked_262144_bytes_is_shrunk(tmp_path):
    path = tmp_path / "stem.py"
    path.write_text(STEM)
    [group] = _groups(path)
    raw = conv._configs(group, "fp32", None)
    asked = next(c for c in raw if c["BM"] == 1024)  # deep_pool's conv_0 in its third variant
    assert (asked["BN"], asked["num_warps"], asked["layout"]) == (64, 8, "fma")
    on_h200 = conv.configs(group, device=H200)
    assert asked not in on_h200 and dict(asked, BM=512) in on_h200
    on_4090 = conv.configs(group, device=RTX4090)
    assert max(c["BM"] for c in on_4090) == 256 < max(c["BM"] for c in on_h200)


def test_an_rtx_4090_gets_smaller_tiles_than_an_h100():
    [group] = _groups(ROOT / "benchmarks" / "gemm_suite" / "5_linear_swish_scale.py")
    h100, rtx = gemm.configs(group, device=H100), gemm.configs(group, device=RTX4090)
    assert h100[0] == {"BM": 128, "BN": 128, "BK": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3,
                       "precision": "fp16x3"}
    assert rtx[0] == dict(h100[0], BK=32, num_stages=2)

    def smem(configs):
        return [composer_dot_need(c).shared_bytes for c in configs]
    assert max(smem(rtx)) <= 99 * 1024 < max(smem(h100)) <= H200_LIMIT
    assert gemm.configs(group) == h100  # no device: the default target, an H100


LSTM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(256, 512, batch_first=True)

    def forward(self, x):
        return self.lstm(x)[0]


def get_inputs():
    return [torch.randn(64, 8, 256)]


def get_init_inputs():
    return []
"""
CUMSUM = LSTM.replace("nn.LSTM(256, 512, batch_first=True)", "nn.Identity()").replace(
    "self.lstm(x)[0]", "torch.cumsum(self.lstm(x), dim=1)")

PROBLEMS = [*(ROOT / "tests" / "fixtures" / "composer" / f"{n}.py"
              for n in ("conv2d_relu", "conv3d_transpose", "conv_channels_last", "conv_phases_depthwise",
                        "linear_gelu_scale", "matmul_bmm", "one_pass_rows", "pooling", "control_flow")),
            *sorted((ROOT / "benchmarks" / "conv_suite").glob("*.py")),
            *sorted((ROOT / "benchmarks" / "gemm_suite").glob("*.py")), "lstm", "cumsum"]


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p if isinstance(p, str) else p.stem)
def test_every_template_config_fits_every_target(problem, tmp_path, monkeypatch):
    if isinstance(problem, str):
        problem = tmp_path / f"{problem}.py"
        problem.write_text(LSTM if problem.stem == "lstm" else CUMSUM)
    checked = []

    def spy(configs, need_of, device=None, fixed=()):
        out = fit_configs(configs, need_of, device, fixed)
        checked.append(out)
        assert out and all(check(need_of(c), device) for c in out)
        return out
    for module in TEMPLATES:
        monkeypatch.setattr(module, "fit_configs", spy)
    groups = _groups(problem)
    for device in (H200, A100, RTX4090, None):
        checked.clear()
        lists = [COMPOSE.group_configs(g, "fp32", None, device) for g in groups]
        assert len(checked) == len(groups) and all(lists)  # every kind went through the check
    kinds = {g.kind for g in groups}
    if problem.stem == "lstm":
        assert "recurrent" in kinds
    if problem.stem == "cumsum":
        assert "scan" in kinds


def test_compose_passes_the_device_to_every_kernel():
    path = ROOT / "benchmarks" / "conv_suite" / "1_conv2d_batchnorm_relu.py"
    for device, limit in ((H200, H200_LIMIT), (RTX4090, 99 * 1024)):
        result = compose(path, max_variants=8, device=device)
        assert result.candidates
        for candidate in result.candidates:
            for config in candidate.config.values():
                if "BK" in config and config.get("layout") != "fma":
                    assert composer_dot_need(config, n_full=128, element_bytes=4).shared_bytes <= limit
