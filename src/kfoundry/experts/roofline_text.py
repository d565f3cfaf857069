"""The roofline estimate every kernel-writing prompt carries: the problem's FLOPs and the bytes any kernel must
move, at the problem file's own sizes (the sizes the final kernel runs at, not the smaller ones a run may test
at), the bound, and the floor on the target GPU at the precision the tolerance needs (kfoundry.bench.floor: the
bench's speed of light). Counted on the meta device, so a 9 GB problem costs nothing to estimate."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kfoundry.bench.floor import COMPUTE, DATASHEET, MEASURED, MEMORY, compute_roofs, speed_of_light
from kfoundry.types import DeviceFacts

HALF_PRECISIONS = ("fp16", "bf16")


@dataclass(frozen=True)
class RooflineEstimate:
    flops: int | None  # matmuls and convolutions only (torch.utils.flop_counter)
    moved: int  # bytes: inputs and parameters read once, outputs written once
    memory_ms: float | None  # moved at the bandwidth
    compute_ms: float | None  # the FLOPs at the fastest roof the precision allows
    roof: str | None  # that roof: FP32, 3xTF32, 3xFP16, TF32, FP16, BF16
    device: str
    eager_ms: float | None = None
    compile_ms: float | None = None

    @property
    def bound(self) -> str | None:
        """memory or compute: whichever floor is higher."""
        if self.memory_ms is None and self.compute_ms is None:
            return None
        return "compute" if (self.compute_ms or 0.0) > (self.memory_ms or 0.0) else "memory"

    @property
    def floor_ms(self) -> float | None:
        return max((t for t in (self.memory_ms, self.compute_ms) if t is not None), default=None)

    def line(self) -> str:
        work = f"{self.flops / 1e9:.4g} GFLOP" if self.flops else "no matmul or convolution FLOPs counted"
        parts = [f"Roofline estimate: {work} and {self.moved / 1e6:.4g} MB moved at the problem file's own sizes"]
        if self.bound is None:
            parts.append(f"no floor on {self.device} (its peaks are unknown)")
        else:
            floors = [f"memory {self.memory_ms:.3g} ms" if self.memory_ms is not None else None,
                      f"compute at {self.roof} {self.compute_ms:.3g} ms" if self.compute_ms is not None else None]
            parts.append(f"{self.bound}-bound on {self.device}: floor {self.floor_ms:.3g} ms "
                         f"({', '.join(f for f in floors if f)})")
        known = [f"eager {self.eager_ms:.3g} ms" if self.eager_ms else None,
                 f"torch.compile {self.compile_ms:.3g} ms" if self.compile_ms else None]
        known = [k for k in known if k]
        parts.append(", ".join(known) if known else "eager and torch.compile not timed at those sizes here")
        return "; ".join(parts) + "."


def estimate(problem: Path | str, precision: str, tolerance: float | None, device: DeviceFacts | None,
             eval_mode: bool = False) -> RooflineEstimate | None:
    """The estimate for the problem file at its own sizes; None where it cannot be run on the meta device (a
    forward that needs real data) or the file does not load."""
    import torch

    from kfoundry.diagnose.performance import moved_bytes
    from kfoundry.experts.composer.read.trace import load_sample
    from kfoundry.problem import measure_cost

    try:
        sample = load_sample(problem, None, eval_mode, "meta")
        with torch.no_grad():
            outputs = sample.model(*sample.inputs)
        cost = measure_cost(sample.model, sample.inputs, outputs)
    except Exception:  # noqa: BLE001 -- data-dependent code or a bad file: no estimate, the prompt says so
        return None
    moved = moved_bytes(cost)
    if precision in HALF_PRECISIONS:  # counted on fp32 tensors: the problem's own are half the width
        moved //= 2
    name = device.name if device is not None else "the target GPU"
    peaks = dict(device.peak_tflops) if device is not None else {}
    bandwidth = device.peak_bandwidth_gbs if device is not None else None
    source = MEASURED if device is not None and device.source.startswith(MEASURED) else DATASHEET
    memory = speed_of_light(None, moved, {}, bandwidth, source)
    roofs = compute_roofs(precision, tolerance, peaks)
    compute = speed_of_light(cost.flops, None, roofs, None, source)
    return RooflineEstimate(cost.flops, moved, memory.ms if memory is not None and memory.bound == MEMORY else None,
                            compute.ms if compute is not None and compute.bound.startswith(COMPUTE) else None,
                            compute.roof if compute is not None else None, name)
