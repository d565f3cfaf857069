"""Performance findings of a timed evaluation: where the runtime stands against the device's roofs,
what bounds it, which kernels take the time, what the compiled Triton kernels cost in registers
and shared memory, and the suggested next step from an explicit table of rules (RULES).

Every number says how it was obtained: ceilings from DeviceFacts (measured or datasheet), the
runtime from the timing report, per-kernel times from one torch.profiler run of forward."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kfoundry.problem import TF32_MIN_TOLERANCE
from kfoundry.types import DiagnosticFinding, Evaluation, ProblemCost, SourceLocation

# Hopper (sm_90) per-SM limits, for the occupancy estimate
REGISTERS_PER_SM = 65536
MAX_WARPS_PER_SM = 64
MAX_BLOCKS_PER_SM = 32
REGISTER_UNIT = 256  # registers are allocated per warp in units of 256
SHARED_RESERVED_PER_BLOCK = 1024
DEFAULT_SHARED_PER_SM = 228 * 1024

LAUNCH_US = 5.0  # typical cost of one launch from Python (host path plus GPU launch latency)
NEAR_ROOFLINE = 0.8
FAR_BELOW = 0.1  # below this fraction of both roofs: latency-bound
LOW_OCCUPANCY = 0.25
FOREIGN_SHARE = 0.1  # kernels that are not the candidate's: flag above this share of GPU time


def pct(x: float) -> str:
    """A fraction as a percentage with two significant digits below 10%."""
    return f"{x:.0%}" if x >= 0.1 else f"{x * 100:.2g}%"


def number(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


def duration(ms: float) -> str:
    return f"{ms * 1e3:.3g} µs" if ms < 0.1 else f"{ms:.4g} ms"


def size(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n:.0f} bytes"


@dataclass
class PerfFacts:
    """The numbers the rules read."""

    precision: str
    tolerance: float | None
    runtime_us: float
    bound: str | None = None
    side: str | None = None  # the roof that bounds the ideal time: memory or compute
    fraction: float | None = None  # roofline time / measured time
    bandwidth_utilization: float | None = None
    compute_utilization: float | None = None
    launches: int | None = None
    spilling: list[str] = field(default_factory=list)
    register_limited: list[tuple[str, float]] = field(default_factory=list)  # (kernel, occupancy)


@dataclass(frozen=True)
class Rule:
    name: str
    focus: str  # one of kfoundry.types.FOCUSES
    condition: Callable[[PerfFacts], bool]
    text: Callable[[PerfFacts], str]


def _tf32_advice(f: PerfFacts) -> str:
    if f.tolerance is not None and f.tolerance >= TF32_MIN_TOLERANCE:
        return (f"the tolerance ({f.tolerance:g}) admits TF32: tl.dot with input_precision='tf32' runs on "
                "tensor cores (about 7x the FP32 FMA peak)")
    tol = f"{f.tolerance:g}" if f.tolerance is not None else "the tolerance"
    return (f"plain TF32 (~1e-3 relative error) would fail {tol}: keep input_precision='ieee', or try "
            "'tf32x3' (three TF32 products, close to FP32 accuracy, still on tensor cores)")


RULES: list[Rule] = [
    Rule("launch-bound", "launch",
         lambda f: f.bound == "launch",
         lambda f: (f"the time goes to launches and host work ({f.launches or '?'} launch(es) per forward, "
                    f"{f.runtime_us:.1f} µs in all): fewer launches: fuse the kernels into one, or one "
                    "persistent kernel that loops over the tiles; keep Python work out of forward")),
    Rule("near-roofline", "algorithm",
         lambda f: f.fraction is not None and f.fraction >= NEAR_ROOFLINE,
         lambda f: (f"already at {pct(f.fraction)} of the {f.side} roofline: little left to tune; only a "
                    "different algorithm (fewer bytes moved or FLOPs done) can still win")),
    Rule("register-spills", "compute",
         lambda f: bool(f.spilling),
         lambda f: (f"{', '.join(f.spilling)} spill(s) registers to local memory: smaller tiles (BLOCK sizes), "
                    "fewer num_stages or fewer live values per thread")),
    Rule("low-occupancy-registers", "compute",
         lambda f: bool(f.register_limited),
         lambda f: ("registers limit occupancy (" + ", ".join(f"{n}: {o:.0%}" for n, o in f.register_limited)
                    + "): smaller tiles or fewer num_stages, or more warps per tile with fewer registers each")),
    Rule("fuse-kernels", "fusion",
         lambda f: f.bound == "memory" and (f.launches or 0) >= 2,
         lambda f: (f"memory-bound across {f.launches} launches: fuse them into one kernel so intermediates "
                    "stay in registers or shared memory instead of a round trip through DRAM")),
    Rule("fp32-matmul-below-peak", "compute",
         lambda f: (f.precision == "fp32" and f.side == "compute" and f.bound != "launch"
                    and (f.compute_utilization or 0.0) < 0.5),
         lambda f: (f"FP32 compute at {pct(f.compute_utilization or 0)} of the FMA peak: tile for reuse (tl.dot on "
                    "64-128 blocks, BLOCK_K 32-64, num_stages 3-4, grouped program order for L2 reuse); "
                    + _tf32_advice(f))),
    Rule("compute-below-peak", "compute",
         lambda f: (f.precision != "fp32" and f.side == "compute" and f.bound != "launch"
                    and (f.compute_utilization or 0.0) < 0.5),
         lambda f: (f"compute at {pct(f.compute_utilization or 0)} of the {f.precision} tensor-core peak: tl.dot "
                    "with larger tiles, deeper pipelining (num_stages), grouped program order for L2 reuse")),
    Rule("latency-bound", "algorithm",
         lambda f: f.bound == "latency",
         lambda f: ("far below both roofs with few launches: too little work in flight; more programs "
                    "(smaller blocks over a larger grid, split the reduction), contiguous vectorized loads, "
                    "fewer dependent steps per loop iteration")),
    Rule("memory-below-bandwidth", "memory",
         lambda f: f.bound == "memory",
         lambda f: (f"memory-bound at {pct(f.bandwidth_utilization or 0)} of peak bandwidth: coalesced, "
                    "contiguous access along the innermost dimension, larger BLOCK per program (>= 1024 "
                    "elements, num_warps 4-8), each byte read once")),
    Rule("compute-bound", "compute",
         lambda f: f.bound == "compute",
         lambda f: "compute-bound: fewer instructions per element (cheaper math, hoisted invariants) or tensor cores"),
]


def matching_rules(facts: PerfFacts) -> list[Rule]:
    """The rules whose condition holds, in table order (the first is the suggested direction)."""
    return [rule for rule in RULES if rule.condition(facts)]


# -- roofline --------------------------------------------------------------------------------------
def moved_bytes(cost: ProblemCost) -> int:
    """The bytes any kernel must move: inputs read and outputs written once, and the weights read once too."""
    return cost.min_bytes + cost.parameter_bytes


def compute_ceiling(peaks: dict[str, float], precision: str, achieved_tflops: float | None) -> tuple[str, float | None]:
    """The compute roof (key, TFLOP/s) for the evaluation's precision. FP32 means FMA without tensor
    cores, unless the kernel already runs faster than that, which only TF32 tensor cores can do."""
    if precision == "fp32":
        fp32, tf32 = peaks.get("fp32"), peaks.get("tf32")
        if fp32 and tf32 and achieved_tflops is not None and achieved_tflops > 1.05 * fp32:
            return "tf32", tf32
        return "fp32", fp32
    return precision, peaks.get(precision)


def roofline(evaluation: Evaluation) -> dict[str, Any] | None:
    cost, facts, runtime_ms = evaluation.cost, evaluation.device_facts, evaluation.timing.runtime_ms
    if cost is None or facts is None or not runtime_ms:
        return None
    seconds = runtime_ms / 1e3
    moved = moved_bytes(cost)
    precision = evaluation.correctness.precision
    flops = cost.flops or None  # 0: the flop counter counts matmuls and convolutions, not pointwise ops
    achieved_tflops = flops / seconds / 1e12 if flops is not None else None
    key, peak_tflops = compute_ceiling(facts.peak_tflops, precision, achieved_tflops)
    bandwidth = facts.peak_bandwidth_gbs
    memory_s = moved / (bandwidth * 1e9) if bandwidth else None
    compute_s = flops / (peak_tflops * 1e12) if flops is not None and peak_tflops else None
    times = [t for t in (memory_s, compute_s) if t is not None]
    if not times:
        return None
    ideal_s = max(times)
    side = "memory" if memory_s is not None and memory_s == ideal_s else "compute"
    data = {
        "runtime_ms": runtime_ms, "flops": cost.flops, "bytes": moved,
        "achieved_tflops": achieved_tflops, "achieved_gbs": moved / seconds / 1e9,
        "peak_tflops": peak_tflops, "peak_key": key, "peak_bandwidth_gbs": bandwidth,
        "memory_ms": memory_s * 1e3 if memory_s is not None else None,
        "compute_ms": compute_s * 1e3 if compute_s is not None else None,
        "roofline_ms": ideal_s * 1e3, "fraction_of_roofline": ideal_s / seconds, "side": side,
        "bandwidth_utilization": memory_s / seconds if memory_s is not None else None,
        "compute_utilization": compute_s / seconds if compute_s is not None else None,
        "intensity": flops / moved if flops is not None and moved else None,
        "ridge": peak_tflops * 1e3 / bandwidth if peak_tflops and bandwidth else None,
    }
    if precision == "fp32" and facts.peak_tflops.get("tf32") and flops is not None and key == "fp32":
        tf32_s = flops / (facts.peak_tflops["tf32"] * 1e12)
        data["roofline_ms_tf32"] = max(tf32_s, memory_s or 0.0) * 1e3
    return data


def _roofline_finding(evaluation: Evaluation, roof: dict[str, Any]) -> DiagnosticFinding:
    facts = evaluation.device_facts
    fraction = roof["fraction_of_roofline"]
    parts = [f"{number(roof['achieved_gbs'])} of {roof['peak_bandwidth_gbs']:.0f} GB/s"
             if roof["peak_bandwidth_gbs"] else f"{number(roof['achieved_gbs'])} GB/s"]
    if roof["achieved_tflops"]:
        parts.append(f"{number(roof['achieved_tflops'])} of {roof['peak_tflops']:.0f} TFLOP/s {roof['peak_key']}"
                     if roof["peak_tflops"] else f"{number(roof['achieved_tflops'])} TFLOP/s")
    memory = duration(roof["memory_ms"]) if roof["memory_ms"] is not None else "n/a"
    compute = duration(roof["compute_ms"]) if roof["compute_ms"] is not None else "n/a"
    evidence = [
        f"roofline time {duration(roof['roofline_ms'])} = max(bytes/bandwidth {memory}, FLOPs/peak {compute}) "
        f"against {duration(roof['runtime_ms'])} measured",
        f"{size(roof['bytes'])} moved at least (inputs, outputs and parameters once), "
        + (f"{roof['flops'] / 1e9:.4g} GFLOP (torch.utils.flop_counter)" if roof["flops"]
           else "no FLOPs counted (torch.utils.flop_counter counts matmuls and convolutions): memory roof only"),
        f"ceilings of {facts.name}: {facts.source}",
    ]
    if roof["intensity"] is not None and roof["ridge"]:
        evidence.append(f"arithmetic intensity {roof['intensity']:.3g} FLOP/byte, ridge point {roof['ridge']:.3g}")
    if roof["peak_key"] == "tf32" and evaluation.correctness.precision == "fp32":
        evidence.append("faster than the FP32 FMA peak: TF32 tensor cores are in use, so their peak is the roof")
    elif "roofline_ms_tf32" in roof:
        evidence.append(f"with TF32 tensor cores the roofline would be {duration(roof['roofline_ms_tf32'])}")
    if fraction > 1.05:
        evidence.append("above the roofline: the ceilings or the byte count are underestimates "
                        "(data served from L2, inputs not all read?)")
    return DiagnosticFinding(
        category="roofline", severity="info",
        title=f"{pct(fraction)} of the roofline: {', '.join(parts)}",
        evidence=evidence, data=roof)


# -- kernels ---------------------------------------------------------------------------------------
def _own(name: str, own_names: set[str]) -> bool:
    return any(own and (name == own or re.search(rf"\b{re.escape(own)}\b", name)) for own in own_names)


def own_kernel_names(evaluation: Evaluation, source: str | None) -> set[str]:
    names = set(evaluation.guard.get("kernel_names") or [])
    if source:
        names |= set(re.findall(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+(\w+)", source))
    return names


def kernel_breakdown(kernels: list[dict[str, Any]], own_names: set[str]) -> list[dict[str, Any]]:
    """Per kernel name: launches, total time (µs, None if not recorded), share of the kernels'
    time (of the launches when no times), and whether the candidate wrote it; longest first."""
    rows: dict[str, dict[str, Any]] = {}
    for kernel in kernels:
        name = kernel.get("name") or "?"
        row = rows.setdefault(name, {"name": name, "launches": 0, "time_us": None, "own": _own(name, own_names)})
        row["launches"] += 1
        duration = kernel.get("duration_us")
        if isinstance(duration, (int, float)):
            row["time_us"] = (row["time_us"] or 0.0) + float(duration)
    timed = all(row["time_us"] is not None for row in rows.values())
    total = sum(row["time_us"] for row in rows.values()) if timed else sum(r["launches"] for r in rows.values())
    for row in rows.values():
        row["share"] = ((row["time_us"] if timed else row["launches"]) / total) if total else None
    return sorted(rows.values(), key=lambda r: -(r["share"] or 0.0))


def _short_name(name: str, limit: int = 60) -> str:
    return name if len(name) <= limit else name[: limit - 3] + "..."


def _kernel_findings(rows: list[dict[str, Any]], runtime_us: float, profile_error: str | None) -> list[DiagnosticFinding]:
    launches = sum(r["launches"] for r in rows)
    busy = sum(r["time_us"] for r in rows) if rows and all(r["time_us"] is not None for r in rows) else None
    evidence = [f"{_short_name(r['name'])}: {r['launches']} launch(es)"
                + (f", {r['time_us']:.1f} µs" if r["time_us"] is not None else "")
                + (f", {r['share']:.0%}" if r["share"] is not None else "")
                + ("" if r["own"] else " [not the candidate's]") for r in rows]
    evidence.append("from one torch.profiler run of forward (not the timed runs)")
    if profile_error:
        evidence.append(f"profiler: {profile_error}")
    top = rows[0]
    title = (f"{len(rows)} kernel(s), {launches} launch(es) per forward; {_short_name(top['name'], 40)} "
             f"takes {top['share']:.0%}" if top["share"] is not None else f"{len(rows)} kernel(s)")
    if busy is not None:
        title += f"; GPU busy {busy:.1f} of {runtime_us:.1f} µs"
    data = {"kernels": rows, "launches": launches, "busy_us": busy, "runtime_us": runtime_us}
    findings = [DiagnosticFinding("kernels", "info", title, evidence, data=data)]
    foreign = [r for r in rows if not r["own"]]
    share = sum(r["share"] or 0.0 for r in foreign)
    if foreign and share >= FOREIGN_SHARE:
        findings.append(DiagnosticFinding(
            "kernels", "warning",
            f"{share:.0%} of the GPU time is in kernels the candidate did not write",
            [f"{_short_name(r['name'])}: {r['launches']} launch(es)" for r in foreign],
            direction="do that work inside the candidate's kernels (an allocation that zero-fills, a copy "
                      "or a PyTorch op between kernels costs a launch and a pass over memory)",
            data={"foreign": [r["name"] for r in foreign], "share": share}))
    return findings


# -- Triton metadata -------------------------------------------------------------------------------
def estimate_occupancy(num_warps: int | None, n_regs: int | None, shared_bytes: int | None,
                       shared_per_sm: int | None = None) -> dict[str, Any] | None:
    """Resident warps per SM / 64, from registers, warps, shared memory and the block limit (Hopper)."""
    if not num_warps or n_regs is None:
        return None
    regs_per_warp = math.ceil(max(n_regs, 1) * 32 / REGISTER_UNIT) * REGISTER_UNIT
    limits = {
        "registers": (REGISTERS_PER_SM // regs_per_warp) // num_warps,
        "warps": MAX_WARPS_PER_SM // num_warps,
        "blocks": MAX_BLOCKS_PER_SM,
    }
    if shared_bytes:
        limits["shared memory"] = (shared_per_sm or DEFAULT_SHARED_PER_SM) // (shared_bytes + SHARED_RESERVED_PER_BLOCK)
    blocks = min(limits.values())
    limiter = min(limits, key=lambda k: (limits[k], k != "warps"))  # a tie with the warp limit is no limit
    return {"occupancy": blocks * num_warps / MAX_WARPS_PER_SM, "blocks_per_sm": blocks,
            "warps_per_sm": blocks * num_warps, "limiter": limiter, "limits": limits}


def _def_location(source: str | None, name: str) -> SourceLocation | None:
    if not source:
        return None
    for number, line in enumerate(source.splitlines(), start=1):
        if re.match(rf"\s*def\s+{re.escape(name)}\s*\(", line):
            return SourceLocation(line=number, text=line.strip(), function=name)
    return None


def _triton_findings(evaluation: Evaluation, source: str | None, facts: PerfFacts) -> list[DiagnosticFinding]:
    device = evaluation.device_facts
    shared_per_sm = device.shared_memory_per_sm_bytes if device else None
    shared_per_block = device.shared_memory_per_block_bytes if device else None
    findings = []
    for meta in evaluation.profile.get("triton") or []:
        name = meta.get("name") or "?"
        if meta.get("error"):
            findings.append(DiagnosticFinding("triton-metadata", "info", f"{name}: registers and shared memory not "
                                              f"derived", [str(meta["error"])], location=_def_location(source, name)))
            continue
        warps, regs, spills, shared = (meta.get(k) for k in ("num_warps", "n_regs", "n_spills", "shared_bytes"))
        occupancy = estimate_occupancy(warps, regs, shared, shared_per_sm)
        parts = [f"{warps} warps" if warps else None,
                 f"{meta.get('num_stages')} stages" if meta.get("num_stages") is not None else None,
                 f"{regs} registers/thread" if regs is not None else None,
                 f"{spills} spills" if spills else None,
                 f"{shared / 1024:.1f} KiB shared" if shared else None]
        title = f"{name}: " + ", ".join(p for p in parts if p)
        evidence, severity = [], "info"
        if occupancy:
            title += f"; est. occupancy {occupancy['occupancy']:.0%} ({occupancy['limiter']})"
            evidence.append(f"{occupancy['blocks_per_sm']} block(s) x {warps} warps resident per SM of "
                            f"{MAX_WARPS_PER_SM} warps; blocks allowed by " + ", ".join(
                                f"{k} {v}" for k, v in occupancy["limits"].items()))
            if occupancy["limiter"] == "registers" and occupancy["occupancy"] < LOW_OCCUPANCY:
                facts.register_limited.append((name, occupancy["occupancy"]))
                severity = "warning"
        if spills:
            facts.spilling.append(name)
            severity = "warning"
            evidence.append(f"{spills} registers spilled to local memory (ptxas)")
        if shared and shared_per_block and shared > shared_per_block:
            severity = "error"
            evidence.append(f"needs {shared} bytes of shared memory, the device allows {shared_per_block} per block")
        if meta.get("derived_for"):
            evidence.append(f"static: compiled as launched for {meta['derived_for']} on this CPU (Triton, ptxas), "
                            "not run; occupancy estimated for 65536 registers and 64 warps per SM")
        else:
            evidence.append("from the compiled kernel's metadata (Triton), occupancy estimated for 65536 registers "
                            "and 64 warps per SM")
        findings.append(DiagnosticFinding("triton-metadata", severity, title, evidence,
                                          location=_def_location(source, name),
                                          data={**meta, "occupancy": occupancy}))
    return findings


# -- baselines -------------------------------------------------------------------------------------
def _baseline_finding(evaluation: Evaluation) -> DiagnosticFinding | None:
    t = evaluation.timing
    if t.eager_ms is None and t.compile_ms is None:
        if not t.baseline_errors:
            return None
        return DiagnosticFinding("baseline", "info", "no baseline timing to compare with",
                                 [f"{k}: {v}" for k, v in t.baseline_errors.items()])
    parts, evidence = [], [f"{t.statistic} of {t.trials} trials on {t.device}" + (f" ({t.method})" if t.method else "")]
    if t.speedup_eager is not None:
        parts.append(f"{t.speedup_eager:.2f}x vs eager ({t.eager_ms:.4g} ms)")
    if t.speedup_compile is not None:
        parts.append(f"{t.speedup_compile:.2f}x vs torch.compile ({t.compile_ms:.4g} ms)")
    beats_compile = t.speedup_compile > 1.0 if t.speedup_compile is not None else None
    if beats_compile is not None:
        parts.append("beats torch.compile" if beats_compile else "does not beat torch.compile")
    evidence += [f"{k}: {v}" for k, v in t.baseline_errors.items()]
    if t.baselines_cached:
        evidence.append("baselines from the cache (same problem, device and versions)")
    slower = t.speedup_eager is not None and t.speedup_eager < 1.0
    return DiagnosticFinding(
        "baseline", "warning" if slower else "info", f"{t.runtime_ms:.4g} ms {t.statistic}: " + ", ".join(parts),
        evidence,
        direction="slower than eager PyTorch: PyTorch's own kernels do this faster; follow the bound's direction"
        if slower else "",
        data={"runtime_ms": t.runtime_ms, "eager_ms": t.eager_ms, "compile_ms": t.compile_ms,
              "speedup_eager": t.speedup_eager, "speedup_compile": t.speedup_compile, "beats_compile": beats_compile})


# -- bound -----------------------------------------------------------------------------------------
def classify(facts: PerfFacts, busy_us: float | None) -> str | None:
    """launch when launches or host work take most of the time, latency when far below both roofs
    with few launches, otherwise the roof the ideal time is on."""
    runtime = facts.runtime_us
    launches = facts.launches
    if launches is not None and launches * LAUNCH_US >= 0.5 * runtime:
        return "launch"
    if busy_us is not None and launches and busy_us < 0.5 * runtime:
        return "launch"
    if launches is None and runtime < 2 * LAUNCH_US:
        return "launch"
    if facts.fraction is None:
        return None
    if facts.fraction < FAR_BELOW and (launches or 1) <= 2:
        return "latency"
    return facts.side


def _launch_count(evaluation: Evaluation, rows: list[dict[str, Any]]) -> int | None:
    if rows:
        return sum(r["launches"] for r in rows)
    per_trial = evaluation.guard.get("launches_per_trial")
    return max(per_trial) if per_trial else None


def _bound_finding(facts: PerfFacts, rules: list[Rule], busy_us: float | None) -> DiagnosticFinding:
    chosen = rules[0] if rules else None
    what = {"memory": "memory-bound", "compute": "compute-bound", "launch": "launch-bound",
            "latency": "latency-bound"}.get(facts.bound or "", "bound unknown")
    evidence = []
    if facts.fraction is not None:
        evidence.append(f"{pct(facts.fraction)} of the roofline, ideal time on the {facts.side} roof")
    if facts.bandwidth_utilization is not None:
        evidence.append(f"bandwidth {pct(facts.bandwidth_utilization)} of peak")
    if facts.compute_utilization is not None:
        evidence.append(f"compute {pct(facts.compute_utilization)} of the {facts.precision} peak")
    if facts.launches is not None:
        evidence.append(f"{facts.launches} launch(es) per forward, ~{LAUNCH_US:g} µs each against "
                        f"{facts.runtime_us:.1f} µs measured")
    if busy_us is not None:
        evidence.append(f"GPU busy {busy_us:.1f} µs of the {facts.runtime_us:.1f} µs (profiled kernels)")
    severity = "info" if facts.bound is None or (facts.fraction or 0) >= NEAR_ROOFLINE else "warning"
    return DiagnosticFinding(
        "bound", severity, what + (f" at {pct(facts.fraction)} of the roofline" if facts.fraction is not None else "")
        + (f"; next: {chosen.name}" if chosen and chosen.name != f"{facts.bound}-bound" else ""), evidence,
        direction=chosen.text(facts) if chosen else "",
        data={"bound": facts.bound, "rule": chosen.name if chosen else None, "focus": chosen.focus if chosen else None,
              "also": [{"rule": r.name, "focus": r.focus, "text": r.text(facts)} for r in rules[1:]]})


def performance_findings(evaluation: Evaluation, source: str | None = None) -> tuple[list[DiagnosticFinding], str | None]:
    """Findings about the speed of an ok evaluation and its bound (None when it was not timed)."""
    if evaluation.status != "ok":
        return [], None
    timing = evaluation.timing
    if timing.runtime_ms is None:
        reason = timing.reason or "no timing was recorded"
        cpu = (evaluation.device_facts is not None and evaluation.device_facts.kind == "cpu") or evaluation.device == "cpu"
        title = "speed not measured on CPU" if cpu else "speed not measured"
        # no advice for the operator here: this text reaches the experts' prompts (a CPU run's note tells the
        # operator how to time it)
        findings = [DiagnosticFinding("bound", "info", f"{title}: {reason}")]
        # what can be known without running on the GPU: each kernel compiled for the target (target_compile.py)
        facts = PerfFacts(precision=evaluation.correctness.precision, tolerance=evaluation.correctness.tolerance,
                          runtime_us=0.0)
        return findings + _triton_findings(evaluation, source, facts), None
    runtime_us = timing.runtime_ms * 1e3
    roof = roofline(evaluation)
    facts = PerfFacts(precision=evaluation.correctness.precision, tolerance=evaluation.correctness.tolerance,
                      runtime_us=runtime_us)
    findings: list[DiagnosticFinding] = []
    if roof is not None:
        facts.side = roof["side"]
        facts.fraction = roof["fraction_of_roofline"]
        facts.bandwidth_utilization = roof["bandwidth_utilization"]
        facts.compute_utilization = roof["compute_utilization"]
        if roof["peak_key"] == "tf32":
            facts.precision = "tf32"
        findings.append(_roofline_finding(evaluation, roof))
    else:
        findings.append(DiagnosticFinding("roofline", "info", "no roofline: the device has no ceilings or the "
                                          "problem no cost", [evaluation.device_facts.source]
                                          if evaluation.device_facts else []))
    rows = kernel_breakdown(evaluation.profile.get("kernels") or [], own_kernel_names(evaluation, source))
    facts.launches = _launch_count(evaluation, rows)
    busy = None
    if rows:
        profile_error = evaluation.profile.get("error") or evaluation.guard.get("profile_error")
        kernel_findings = _kernel_findings(rows, runtime_us, profile_error)
        busy = kernel_findings[0].data["busy_us"]
        findings += kernel_findings
    findings += _triton_findings(evaluation, source, facts)
    baseline = _baseline_finding(evaluation)
    if baseline:
        findings.append(baseline)
    facts.bound = classify(facts, busy)
    findings.insert(0, _bound_finding(facts, matching_rules(facts), busy))
    return findings, facts.bound
