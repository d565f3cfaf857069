"""Device facts as the lines a prompt shows: every figure, or "not measured" where it is missing.

A GPU run shows the GPU's own facts. A CPU run shows a target GPU's datasheet facts
(kfoundry.evaluate.shared.device_facts.prompt_device: the one named, or a typical one) and says that speed
is not measured on this run."""

from __future__ import annotations

from kfoundry.evaluate.shared.device_facts import TARGET, TYPICAL_TARGET, prompt_device
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


def _number(value: int | None) -> str:
    return NOT_MEASURED if value is None else str(value)


def _peaks(peaks: dict[str, float]) -> str:
    if not peaks:
        return NOT_MEASURED
    return ", ".join(f"{precision} {value:g} TFLOP/s" for precision, value in peaks.items())


def _gpu(facts: DeviceFacts) -> str:
    capability = f"compute capability {facts.compute_capability}" if facts.compute_capability else (
        f"compute capability {NOT_MEASURED}")
    return f"{facts.name} ({capability})"


def device_lines(facts: DeviceFacts | None) -> list[str]:
    if facts is None or facts.kind not in ("cuda", TARGET, TYPICAL_TARGET):
        facts = prompt_device(facts)  # a CPU's own figures would mislead: a typical target's instead
    if facts.kind == "cuda":
        head = [f"GPU: {_gpu(facts)}"]
        source = f"sizes read from this GPU's properties; peaks: {facts.source or NOT_MEASURED}"
    else:
        if facts.kind == TARGET:
            head = [f"target GPU: {_gpu(facts)}; the figures below are its datasheet figures"]
        else:
            head = [f"target GPU: unknown (no target GPU was named); the figures below are a typical target's, "
                    f"the datasheet figures of the {_gpu(facts)}"]
        head.append("speed is not measured on this run: this machine is a CPU, where kernels run through Triton's "
                    "interpreter to check correctness only; write for the target GPU above and keep the code "
                    "correct first")
        source = facts.source
    bandwidth = f"{facts.peak_bandwidth_gbs:g} GB/s" if facts.peak_bandwidth_gbs else NOT_MEASURED
    return [
        *head,
        f"SM count: {_number(facts.sm_count)}",
        f"shared memory per block (opt-in max): {_bytes(facts.shared_memory_per_block_bytes)}",
        f"shared memory per SM: {_bytes(facts.shared_memory_per_sm_bytes)}",
        f"registers per SM (32-bit): {_number(facts.registers_per_sm)}",
        f"registers per thread (max): {_number(facts.max_registers_per_thread)}",
        f"L2 cache: {_bytes(facts.l2_bytes)}",
        f"device memory: {_bytes(facts.memory_bytes)}",
        f"memory bandwidth (peak): {bandwidth}",
        f"compute (peak): {_peaks(facts.peak_tflops)}",
        f"where the figures come from: {source}",
    ]
