"""kfoundry.evaluate.shared.gpu_table and the facts built from it: datasheet_for, target_facts, prompt_device,
and cuda_facts' registers and compute capability (from a stand-in for torch's device properties)."""

from types import SimpleNamespace

import pytest

from kfoundry.errors import UsageError
from kfoundry.evaluate.shared import device_facts as df
from kfoundry.evaluate.shared.gpu_table import GPUS, KiB, MiB, known_names, lookup
from kfoundry.types import DeviceFacts

CPU = DeviceFacts(kind="cpu", name="AMD EPYC (16 cores)", source="none: no ceilings on CPU")


def test_every_gpu_has_every_figure():
    assert {"NVIDIA H100 SXM", "NVIDIA H100 PCIe", "NVIDIA H200", "NVIDIA A100 80GB SXM", "NVIDIA L40S",
            "NVIDIA GeForce RTX 4090"} <= set(known_names())
    for spec in GPUS:
        assert spec.sm_count > 0 and spec.registers_per_sm == 65536 and spec.max_registers_per_thread == 255
        assert 0 < spec.shared_memory_per_block_bytes < spec.shared_memory_per_sm_bytes
        assert spec.l2_bytes >= 40 * MiB and spec.memory_bytes > spec.l2_bytes and spec.bandwidth_gbs > 0
        assert set(spec.peak_tflops) == {"fp32", "tf32", "fp16", "bf16"}
        assert spec.compute_capability in ("8.0", "8.9", "9.0")


@pytest.mark.parametrize("name, expected", [
    ("h200", "NVIDIA H200"), ("H200", "NVIDIA H200"), ("NVIDIA H200", "NVIDIA H200"),
    ("NVIDIA GH200 480GB", "NVIDIA H200"),
    ("H100", "NVIDIA H100 SXM"), ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"), ("h100-sxm5", "NVIDIA H100 SXM"),
    ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"), ("h100pcie", "NVIDIA H100 PCIe"), ("H100_PCIE", "NVIDIA H100 PCIe"),
    ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB SXM"), ("a100", "NVIDIA A100 80GB SXM"),
    ("l40s", "NVIDIA L40S"), ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"),
    ("rtx4090", "NVIDIA GeForce RTX 4090"),
    ("NVIDIA RTX A1000", None), ("NVIDIA L40", None), ("H20", None), ("", None),
])
def test_names_match_tolerantly_but_not_inside_other_names(name, expected):
    spec = lookup(name)
    assert (spec.name if spec else None) == expected


def test_datasheet_for_keeps_its_shape_and_figures():
    bandwidth, peaks = df.datasheet_for("NVIDIA H100 80GB HBM3")
    assert bandwidth == 3350.0 and peaks == {"fp32": 67.0, "tf32": 495.0, "fp16": 990.0, "bf16": 990.0}
    assert df.datasheet_for("NVIDIA H100 PCIe")[0] == 2000.0 and df.datasheet_for("NVIDIA H200")[0] == 4800.0
    assert df.datasheet_for("NVIDIA A100-SXM4-80GB")[1]["tf32"] == 156.0
    assert df.datasheet_for("Intel Xeon") is None
    peaks["fp32"] = 0.0  # a caller's copy: the table stays as it was
    assert df.datasheet_for("H100")[1]["fp32"] == 67.0


def test_target_facts_fill_every_figure_and_say_where_they_come_from():
    facts = df.target_facts("nvidia h200")
    assert facts.kind == df.TARGET and facts.name == "NVIDIA H200" and facts.compute_capability == "9.0"
    assert facts.sm_count == 132 and facts.shared_memory_per_block_bytes == 227 * KiB
    assert facts.shared_memory_per_sm_bytes == 228 * KiB and facts.registers_per_sm == 65536
    assert facts.max_registers_per_thread == 255 and facts.l2_bytes == 50 * MiB
    assert facts.peak_bandwidth_gbs == 4800.0 and facts.peak_tflops["bf16"] == 990.0
    assert facts.source == "datasheet (bundled table): not measured on this machine"


def test_an_unknown_target_lists_the_known_ones():
    with pytest.raises(UsageError, match="unknown target GPU 'H20'") as info:
        df.target_facts("H20")
    for name in known_names():
        assert name in str(info.value)


def test_prompt_device_substitutes_a_target_on_cpu_only():
    named = df.prompt_device(CPU, "L40S")
    assert named.kind == df.TARGET and named.name == "NVIDIA L40S" and "AMD EPYC" in named.source
    typical = df.prompt_device(CPU, None)
    assert typical.kind == df.TYPICAL_TARGET and typical.name == "NVIDIA H100 SXM"
    assert df.prompt_device(None).kind == df.TYPICAL_TARGET
    gpu = DeviceFacts(kind="cuda", name="NVIDIA A100-SXM4-80GB", sm_count=108, source="measured")
    assert df.prompt_device(gpu, "H200") is gpu  # a GPU run shows its own facts
    assert df.prompt_device(named, "H200") is named  # already a prompt's device
    with pytest.raises(UsageError):
        df.prompt_device(CPU, "H20")


def _props(**extra):
    base = dict(name="NVIDIA H100 80GB HBM3", major=9, minor=0, multi_processor_count=132, total_memory=80 << 30)
    return SimpleNamespace(**{**base, **extra})


def test_registers_and_capability_come_from_the_properties_else_the_table():
    facts = DeviceFacts(kind="cuda", name="NVIDIA H100 80GB HBM3")
    df._fill_from_table(facts, _props(regs_per_multiprocessor=65536))
    assert facts.compute_capability == "9.0" and facts.registers_per_sm == 65536
    assert facts.max_registers_per_thread == 255 and facts.shared_memory_per_block_bytes == 227 * KiB
    unknown = DeviceFacts(kind="cuda", name="NVIDIA Mystery", shared_memory_per_block_bytes=1000)
    df._fill_from_table(unknown, _props(name="NVIDIA Mystery", major=12, minor=0, regs_per_multiprocessor=65536))
    assert unknown.compute_capability == "12.0" and unknown.registers_per_sm == 65536
    assert unknown.max_registers_per_thread == 255 and unknown.shared_memory_per_block_bytes == 1000
    assert unknown.l2_bytes is None  # not in the table, not in the properties: left missing


def test_cuda_facts_without_measuring_read_the_properties(monkeypatch):
    import torch

    props = _props(regs_per_multiprocessor=65536, uuid="GPU-1", L2_cache_size=50 * MiB,
                   shared_memory_per_block_optin=227 * KiB, shared_memory_per_multiprocessor=228 * KiB)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    facts = df.cuda_facts("cuda:0", measure=False)
    assert facts.kind == "cuda" and facts.compute_capability == "9.0" and facts.registers_per_sm == 65536
    assert facts.max_registers_per_thread == 255 and facts.peak_bandwidth_gbs == 3350.0
    assert facts.source == "datasheet"
