"""Facts about the device: identity, sizes and ceilings (bandwidth, FLOP/s per precision).

Ceilings are measured once per GPU (identified by UUID) and cached; datasheet values are the
fallback where a measurement fails. Computed in the trusted reference process only.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

from kfoundry.evaluate.signed_cache import read_signed, write_signed
from kfoundry.types import DeviceFacts, to_jsonable

FACTS_VERSION = 1

# Dense datasheet peaks (no sparsity): name fragment -> (GB/s, {precision: TFLOP/s}).
DATASHEET = {
    "H200": (4800.0, {"fp32": 67.0, "tf32": 495.0, "fp16": 990.0, "bf16": 990.0}),
    "H100 PCIe": (2000.0, {"fp32": 51.0, "tf32": 378.0, "fp16": 756.0, "bf16": 756.0}),
    "H100": (3350.0, {"fp32": 67.0, "tf32": 495.0, "fp16": 990.0, "bf16": 990.0}),
    "A100": (2039.0, {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0}),
    "L40S": (864.0, {"fp32": 91.6, "tf32": 183.0, "fp16": 362.0, "bf16": 362.0}),
    "RTX 4090": (1008.0, {"fp32": 82.6, "tf32": 82.6, "fp16": 165.0, "bf16": 165.0}),
}


def datasheet_for(name: str) -> tuple[float, dict[str, float]] | None:
    for fragment, values in DATASHEET.items():
        if fragment in name:
            return values
    return None


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
            return DeviceFacts(**cached)
        except TypeError:
            pass
    facts = cuda_facts(device, measure=measure)
    if path is not None and measure:
        write_signed(cache_dir, path, to_jsonable(facts))
    return facts
