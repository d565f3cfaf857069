"""Device facts as the lines a prompt shows: every figure, or "not measured" where it is missing."""

from __future__ import annotations

from kfoundry.types import DeviceFacts

NOT_MEASURED = "not measured"


def _bytes(value: int | None) -> str:
    if value is None:
        return NOT_MEASURED
    if value >= 1 << 30:
        return f"{value / (1 << 30):.1f} GiB"
    if value >= 1 << 20:
        return f"{value / (1 << 20):.1f} MiB"
    return f"{value / 1024:.0f} KiB ({value} bytes)"


def _peaks(peaks: dict[str, float]) -> str:
    if not peaks:
        return NOT_MEASURED
    return ", ".join(f"{precision} {value:g} TFLOP/s" for precision, value in peaks.items())


def device_lines(facts: DeviceFacts | None) -> list[str]:
    if facts is None or facts.kind != "cuda":
        where = f" (this run is on {facts.name})" if facts is not None else ""
        return [(f"target GPU: unknown{where}; speed is not measured here: kernels run through "
                 "Triton's CPU interpreter to check correctness only, so write for a modern NVIDIA GPU "
                 "(e.g. 100+ SMs, 48+ KiB of shared memory per block) and keep the code correct first")]
    bandwidth = f"{facts.peak_bandwidth_gbs:g} GB/s" if facts.peak_bandwidth_gbs else NOT_MEASURED
    lines = [
        f"GPU: {facts.name}",
        f"SM count: {facts.sm_count if facts.sm_count is not None else NOT_MEASURED}",
        f"memory bandwidth (peak): {bandwidth}",
        f"compute (peak): {_peaks(facts.peak_tflops)}",
        f"L2 cache: {_bytes(facts.l2_bytes)}",
        f"shared memory per block (opt-in max): {_bytes(facts.shared_memory_per_block_bytes)}",
        f"shared memory per SM: {_bytes(facts.shared_memory_per_sm_bytes)}",
        f"device memory: {_bytes(facts.memory_bytes)}",
    ]
    if facts.source:
        lines.append(f"how the peaks were obtained: {facts.source}")
    return lines
