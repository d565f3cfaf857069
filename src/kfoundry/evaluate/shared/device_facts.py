"""Facts about the device: identity, sizes and ceilings (bandwidth, FLOP/s per precision).

Ceilings are measured once per GPU (identified by UUID) and cached; datasheet values are the
fallback where a measurement fails. Computed in the trusted reference process only. On a CPU run the
prompts show a GPU's datasheet facts instead (`prompt_device`: the --target-gpu, or a typical one).
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

from kfoundry.errors import UsageError
from kfoundry.evaluate.shared.gpu_table import TYPICAL, known_names, lookup
from kfoundry.evaluate.shared.signed_cache import read_signed, write_signed
from kfoundry.types import DeviceFacts, to_jsonable

FACTS_VERSION = 1

# The kinds of facts a prompt may be given besides a measured GPU's ("cuda") and a CPU's ("cpu"): a GPU
# this run does not run on, by its datasheet; named (--target-gpu) or, none named, a typical one.
TARGET, TYPICAL_TARGET = "target", "typical target"
DATASHEET_SOURCE = "datasheet (bundled table): not measured on this machine"


def datasheet_for(name: str) -> tuple[float, dict[str, float]] | None:
    """(GB/s, {precision: dense TFLOP/s}) of the bundled table's GPU that `name` names, if any."""
    spec = lookup(name)
    return (spec.bandwidth_gbs, dict(spec.peak_tflops)) if spec is not None else None


def target_facts(name: str) -> DeviceFacts:
    """The datasheet facts of the GPU `name` names ("H200", "h100 pcie", "NVIDIA L40S")."""
    spec = lookup(name)
    if spec is None:
        raise UsageError(f"unknown target GPU {name!r}: the bundled table knows {', '.join(known_names())}")
    return DeviceFacts(
        kind=TARGET, name=spec.name, sm_count=spec.sm_count, l2_bytes=spec.l2_bytes,
        shared_memory_per_block_bytes=spec.shared_memory_per_block_bytes,
        shared_memory_per_sm_bytes=spec.shared_memory_per_sm_bytes, memory_bytes=spec.memory_bytes,
        peak_bandwidth_gbs=spec.bandwidth_gbs, peak_tflops=dict(spec.peak_tflops), source=DATASHEET_SOURCE,
        registers_per_sm=spec.registers_per_sm, max_registers_per_thread=spec.max_registers_per_thread,
        compute_capability=spec.compute_capability)


def prompt_device(measured: DeviceFacts | None, target: str | None = None) -> DeviceFacts:
    """The device a prompt shows. A GPU run: its measured facts (`target` is ignored). A CPU run (or
    no facts): the datasheet facts of `target`, or of a typical target when none is named, since a
    CPU's figures say nothing about the GPU the kernel is written for."""
    if measured is not None and measured.kind in ("cuda", TARGET, TYPICAL_TARGET):
        return measured
    facts = target_facts(target or TYPICAL)
    if not target:
        facts.kind = TYPICAL_TARGET
    if measured is not None:
        facts.source = f"{DATASHEET_SOURCE}; this run is on {measured.name}, a CPU"
    return facts


def cpu_facts() -> DeviceFacts:
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return DeviceFacts(kind="cpu", name=f"{name} ({os.cpu_count()} cores)", source="none: no ceilings on CPU")


def _measure_bandwidth_gbs(torch, device) -> float:
    n = 1 << 28  # 1 GiB of fp32
    src = torch.empty(n, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(10):
        torch.cuda.synchronize(device)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize(device)
        times.append(start.elapsed_time(end))
    times.sort()
    seconds = times[len(times) // 2] / 1e3
    return 2 * src.numel() * src.element_size() / seconds / 1e9


def _measure_tflops(torch, device, dtype, tf32: bool) -> float:
    n = 8192
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        for _ in range(3):
            a @ b
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(10):
            torch.cuda.synchronize(device)
            start.record()
            a @ b
            end.record()
            torch.cuda.synchronize(device)
            times.append(start.elapsed_time(end))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    times.sort()
    return 2 * n**3 / (times[len(times) // 2] / 1e3) / 1e12


def _fill_from_table(facts: DeviceFacts, props) -> None:
    """Compute capability and registers from the device's properties where torch has them (older
    torch lacks regs_per_multiprocessor), else the bundled table; sizes torch lacks, from the table."""
    major, minor = getattr(props, "major", None), getattr(props, "minor", None)
    if facts.compute_capability is None and major is not None:
        facts.compute_capability = f"{major}.{minor}"
    if facts.registers_per_sm is None:
        facts.registers_per_sm = getattr(props, "regs_per_multiprocessor", None)
    spec = lookup(facts.name)
    if spec is not None:
        for name in ("registers_per_sm", "max_registers_per_thread", "l2_bytes", "shared_memory_per_block_bytes",
                     "shared_memory_per_sm_bytes", "compute_capability"):
            if getattr(facts, name) is None:
                setattr(facts, name, getattr(spec, name))
    if facts.max_registers_per_thread is None and major is not None and (major, minor) >= (3, 5):
        facts.max_registers_per_thread = 255  # every compute capability from 3.5 on (CUDA Programming Guide)


def cuda_facts(device, measure: bool = True) -> DeviceFacts:
    import torch

    device = torch.device(device)
    props = torch.cuda.get_device_properties(device)
    facts = DeviceFacts(
        kind="cuda",
        name=props.name,
        uuid=str(getattr(props, "uuid", "")) or None,
        sm_count=props.multi_processor_count,
        l2_bytes=getattr(props, "L2_cache_size", None),
        shared_memory_per_block_bytes=getattr(props, "shared_memory_per_block_optin", None),
        shared_memory_per_sm_bytes=getattr(props, "shared_memory_per_multiprocessor", None),
        memory_bytes=props.total_memory,
    )
    _fill_from_table(facts, props)
    sheet = datasheet_for(props.name)
    sources = []
    if measure:
        try:
            facts.peak_bandwidth_gbs = round(_measure_bandwidth_gbs(torch, device), 1)
            for precision, dtype, tf32 in (
                ("fp32", torch.float32, False), ("tf32", torch.float32, True),
                ("fp16", torch.float16, False), ("bf16", torch.bfloat16, False),
            ):
                facts.peak_tflops[precision] = round(_measure_tflops(torch, device, dtype, tf32), 1)
            sources.append("measured (1 GiB device copy; 8192^3 torch matmul on random data; medians of 10)")
        except Exception as exc:  # measurement is best effort: fall back to the datasheet
            sources.append(f"measurement failed ({type(exc).__name__}: {exc})")
        torch.cuda.empty_cache()
    if sheet is not None:
        if facts.peak_bandwidth_gbs is None:
            facts.peak_bandwidth_gbs = sheet[0]
        for precision, value in sheet[1].items():
            facts.peak_tflops.setdefault(precision, value)
        if not facts.peak_tflops or not measure:
            sources.append("datasheet")
    facts.source = "; ".join(sources) or "unknown device: no ceilings"
    return facts


def device_facts(device: str, cache_dir: Path | None, measure: bool = True) -> DeviceFacts:
    """Facts for `device`, from the cache when this GPU was measured before."""
    if not device.startswith("cuda"):
        return cpu_facts()
    import torch

    props = torch.cuda.get_device_properties(torch.device(device))
    key = str(getattr(props, "uuid", props.name)).replace("/", "_").replace(" ", "_")
    path = cache_dir / "devices" / f"{key}-v{FACTS_VERSION}.json" if cache_dir else None
    cached = read_signed(cache_dir, path) if path is not None else None
    if isinstance(cached, dict):
        try:
            facts = DeviceFacts(**cached)
        except TypeError:
            pass
        else:
            _fill_from_table(facts, props)  # a record from before the registers were kept
            return facts
    facts = cuda_facts(device, measure=measure)
    if path is not None and measure:
        write_signed(cache_dir, path, to_jsonable(facts))
    return facts
