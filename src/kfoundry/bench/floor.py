"""A problem's floor (its speed of light): the least time any kernel can take for it on the device, at the
precision the kernel is judged at; and the fraction of the floor a time reaches (floor / time: 1.0 is at the
speed of light).

The floor is the larger of the bytes the problem must move at the memory bandwidth and its FLOPs at the fastest
compute roof that honours the precision: fp32 by FP32 FMAs, by three TF32 products per FLOP (3xTF32: a high
and a low part of each operand, on tensor cores) or by three fp16 products per FLOP (3xFP16: the same split of
operands scaled by a power of two, as the composer's fp16x3 main loops do: 22 bits of each operand, as 3xTF32
keeps); by one TF32 or one fp16 product per FLOP (TF32, FP16: TF32's 11 bits) only where a verdict admits
TF32's error: the tolerance does (kfoundry.problem.TF32_MIN_TOLERANCE), or the reference rounds like TF32 itself
(kfoundry.types.ReferenceRounding: cuDNN's convolutions on a GPU). fp16 and bf16 by their tensor-core peak.
FLOPs and bytes are the roofline's (kfoundry.diagnose.performance): the flop counter counts matmuls and
convolutions only, so a problem without them is bound by its bytes.

Ceilings: the run's measured ones where it measured them, else the datasheet's of its GPU (the bundled table);
a CPU run has no floor."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kfoundry.evaluate.shared.device_facts import datasheet_for
from kfoundry.problem import TF32_MIN_TOLERANCE
from kfoundry.types import ProblemCost, ReferenceRounding

MEMORY = "memory"
COMPUTE = "compute: "  # the bound of a compute floor, before the roof's name: "compute: 3xTF32"
MEASURED, DATASHEET = "measured", "datasheet"
# a ProblemResult's and a bench row's fields (bench.json, bench.csv): the floor, then each time's fraction of it
FLOOR_FIELDS = ("floor_ms", "floor_bound", "floor_source")
FRACTION_FIELDS = ("ours_of_floor", "eager_of_floor", "compile_of_floor")
FIELDS = FLOOR_FIELDS + FRACTION_FIELDS


def _positive(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and value > 0 else None


@dataclass(frozen=True)
class Floor:
    """A problem's speed of light on a device, and the roof that sets it."""

    ms: float
    bound: str  # MEMORY, or COMPUTE and the roof's name
    source: str  # MEASURED or DATASHEET: whose ceilings

    @property
    def roof(self) -> str:
        """The roof that sets the floor: memory, 3xTF32, 3xFP16, FP32, TF32, FP16, BF16."""
        return self.bound.removeprefix(COMPUTE)

    def of(self, ms: float | None) -> float | None:
        """The fraction of the floor a time reaches (floor / time); None without a time."""
        ms = _positive(ms)
        return None if ms is None else self.ms / ms

    @classmethod
    def from_fields(cls, record: Mapping[str, Any]) -> Floor | None:
        """The floor a record's FLOOR_FIELDS hold (bench.json); None in a record without one."""
        ms, bound, source = (record.get(name) for name in FLOOR_FIELDS)
        if _positive(ms) is None or not isinstance(bound, str):
            return None
        return cls(float(ms), bound, str(source or ""))


def floor_fields(floor: Floor | None, ours_ms: float | None, eager_ms: float | None,
                 compile_ms: float | None) -> dict[str, Any]:
    """FIELDS of a problem: its floor and the fraction of it our, eager's and torch.compile's times reach."""
    if floor is None:
        return dict.fromkeys(FIELDS)
    return {"floor_ms": floor.ms, "floor_bound": floor.bound, "floor_source": floor.source,
            "ours_of_floor": floor.of(ours_ms), "eager_of_floor": floor.of(eager_ms),
            "compile_of_floor": floor.of(compile_ms)}


@dataclass(frozen=True)
class Ceilings:
    """The device's roofs a floor is computed at, and whose they are."""

    bandwidth_gbs: float | None
    peak_tflops: Mapping[str, float]  # dense, by precision: fp32 (FMA), tf32, fp16, bf16
    source: str  # MEASURED or DATASHEET


def ceilings(facts: Mapping[str, Any] | None) -> Ceilings | None:
    """The ceilings a floor is computed at, from an evaluation's device facts: the measured ones where the run
    measured them, else the datasheet's of its GPU; None on a CPU or a GPU the bundled table does not know."""
    facts = facts or {}
    if facts.get("kind") != "cuda":
        return None
    if str(facts.get("source") or "").startswith(MEASURED) and _positive(facts.get("peak_bandwidth_gbs")):
        return Ceilings(float(facts["peak_bandwidth_gbs"]), dict(facts.get("peak_tflops") or {}), MEASURED)
    sheet = datasheet_for(str(facts.get("name") or ""))
    return Ceilings(sheet[0], sheet[1], DATASHEET) if sheet else None


def compute_roofs(precision: str, tolerance: float | None, peaks: Mapping[str, float],
                  reference: ReferenceRounding | None = None) -> dict[str, float]:
    """The compute roofs that honour `precision` at `tolerance`, for a reference that rounds as `reference` says
    (None: as fp32): name -> the problem's TFLOP/s on it."""
    roofs: dict[str, float] = {}
    if precision == "fp32":
        tf32_level = (tolerance is not None and tolerance >= TF32_MIN_TOLERANCE) or \
            (reference is not None and reference.tf32_level())
        if _positive(peaks.get("fp32")):
            roofs["FP32"] = peaks["fp32"]
        for name, key in (("TF32", "tf32"), ("FP16", "fp16")):
            if _positive(peaks.get(key)):
                roofs[f"3x{name}"] = peaks[key] / 3
                if tf32_level:
                    roofs[name] = peaks[key]
    elif _positive(peaks.get(precision)):
        roofs[precision.upper()] = peaks[precision]
    return roofs


def speed_of_light(flops: float | None, moved: float | None, roofs: Mapping[str, float],
                   bandwidth_gbs: float | None, source: str) -> Floor | None:
    """The larger of `moved` bytes at the bandwidth and `flops` at the fastest of `roofs` (name -> TFLOP/s);
    None where neither is known."""
    memory_s = moved / (bandwidth_gbs * 1e9) if _positive(moved) and _positive(bandwidth_gbs) else None
    compute = [(flops / (rate * 1e12), name) for name, rate in roofs.items() if _positive(rate)] \
        if _positive(flops) else []
    fastest = min(compute, default=None)
    if fastest is not None and (memory_s is None or fastest[0] > memory_s):
        return Floor(fastest[0] * 1e3, COMPUTE + fastest[1], source)
    return Floor(memory_s * 1e3, MEMORY, source) if memory_s is not None else None


def floor_of(evaluation: Mapping[str, Any] | None) -> Floor | None:
    """The floor of the problem an evaluation judged (its Evaluation.to_dict()): from its cost, device facts,
    precision, tolerance and the reference's rounding, which every evaluation of a problem in one run shares."""
    from kfoundry.diagnose.performance import moved_bytes

    evaluation = evaluation or {}
    found = ceilings(evaluation.get("device_facts"))
    if found is None or not evaluation.get("cost"):
        return None
    try:
        cost = ProblemCost.from_dict(evaluation["cost"])
    except TypeError:  # a record from another version of the types
        return None
    correctness = evaluation.get("correctness") or {}
    rounding = evaluation.get("reference_rounding")
    roofs = compute_roofs(correctness.get("precision") or "fp32", correctness.get("tolerance"), found.peak_tflops,
                          None if rounding is None else ReferenceRounding.from_dict(rounding))
    return speed_of_light(cost.flops, moved_bytes(cost), roofs, found.bandwidth_gbs, found.source)
