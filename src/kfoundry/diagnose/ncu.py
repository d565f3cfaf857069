"""Nsight Compute: the command prefix a re-run goes under, its CSV log parsed, and findings from it.

The re-run brackets one warm forward with cudaProfilerStart/Stop, so `--profile-from-start off`
leaves compilation, autotuning and warm-up out of the profile. `ncu --csv` writes one row per
(launch, metric) on its details page, or one row per launch with a units row on the raw page;
both are read. Values may carry thousands separators; "n/a" becomes None.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from kfoundry.types import DiagnosticFinding

OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
TENSOR_HMMA = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"  # mma.sync
TENSOR_GMMA = "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"  # Hopper wgmma
DURATION = "gpu__time_duration.sum"
REGISTERS = "launch__registers_per_thread"
METRICS = (OCCUPANCY, DRAM, SM, TENSOR_HMMA, TENSOR_GMMA, DURATION, REGISTERS)

IDENTITY = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
            "Grid Size", "Device", "CC", "Kernel Time")
BUSY, IDLE = 60.0, 40.0  # % of peak: a unit this busy bounds the kernel; both below IDLE: latency
LOW_ACHIEVED_OCCUPANCY = 30.0


def ncu_command(log_path: str | Path, executable: str = "ncu", metrics: tuple[str, ...] = METRICS) -> list[str]:
    """The wrapper prefix for the worker's command line (the worker's python follows it)."""
    return [executable, "--target-processes", "all", "--clock-control", "none", "--profile-from-start", "off",
            "--csv", "--log-file", str(log_path), "--metrics", ",".join(metrics)]


def parse_value(text: str | None) -> float | None:
    if text is None:
        return None
    text = text.strip().replace(",", "")
    if not text or text.lower() in ("n/a", "nan", "(!)"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _csv_rows(text: str) -> list[list[str]]:
    """The CSV table of an ncu log: from its header row on, ==PROF== and program lines left out."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        return []
    table = [line for line in lines[start:] if line.startswith('"')]
    return list(csv.reader(io.StringIO("\n".join(table))))


def _identity(row: dict[str, str]) -> dict[str, Any]:
    return {"id": int(row["ID"]) if row.get("ID", "").isdigit() else row.get("ID"), "name": row.get("Kernel Name", ""),
            "block": row.get("Block Size"), "grid": row.get("Grid Size"), "device": row.get("Device"),
            "cc": row.get("CC"), "stream": row.get("Stream"), "metrics": {}, "units": {}}


def parse_ncu_csv(text: str) -> list[dict[str, Any]]:
    """One record per profiled launch, in order: {"id", "name", "block", "grid", "device", "cc",
    "stream", "metrics": {metric: float | None}, "units": {metric: unit}}."""
    rows = _csv_rows(text)
    if not rows:
        return []
    header, body = rows[0], rows[1:]
    records: dict[Any, dict[str, Any]] = {}
    if "Metric Name" in header:  # details page: one row per metric
        for values in body:
            row = dict(zip(header, values))
            if not row.get("Metric Name"):
                continue
            record = records.setdefault(row.get("ID"), _identity(row))
            record["metrics"][row["Metric Name"]] = parse_value(row.get("Metric Value"))
            record["units"][row["Metric Name"]] = row.get("Metric Unit", "")
        return list(records.values())
    metric_columns = [name for name in header if name not in IDENTITY]
    units: dict[str, str] = {}
    for values in body:  # raw page: a units row (empty ID), then one row per launch
        row = dict(zip(header, values))
        if not row.get("ID"):
            units = {name: row.get(name, "") for name in metric_columns}
            continue
        record = _identity(row)
        record["metrics"] = {name: parse_value(row.get(name)) for name in metric_columns}
        record["units"] = dict(units)
        records[row["ID"]] = record
    return list(records.values())


def ncu_errors(text: str) -> list[str]:
    """The ==ERROR== and ==WARNING== lines of an ncu log (no permission to the counters, unknown metric...)."""
    return [line.strip() for line in text.splitlines() if line.startswith(("==ERROR==", "==WARNING=="))]


def _aggregate(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per kernel name: launches, total duration, and each metric averaged over launches (weighted by duration)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault(record.get("name") or "?", []).append(record)
    out = []
    for name, group in groups.items():
        durations = [r["metrics"].get(DURATION) for r in group]
        weights = [d if isinstance(d, (int, float)) and d > 0 else 1.0 for d in durations]
        metrics: dict[str, float] = {}
        for metric in {m for r in group for m in r["metrics"]}:
            pairs = [(r["metrics"].get(metric), w) for r, w in zip(group, weights)]
            pairs = [(v, w) for v, w in pairs if v is not None]
            if pairs:
                metrics[metric] = sum(v * w for v, w in pairs) / sum(w for _, w in pairs)
        total = sum(d for d in durations if isinstance(d, (int, float)))
        unit = group[0].get("units", {}).get(DURATION, "")
        out.append({"name": name, "launches": len(group), "metrics": metrics,
                    "duration": total if any(isinstance(d, (int, float)) for d in durations) else None,
                    "duration_unit": unit})
    return sorted(out, key=lambda k: -(k["duration"] or 0.0))


def _verdict(metrics: dict[str, float]) -> tuple[str, str]:
    dram, sm = metrics.get(DRAM), metrics.get(SM)
    occupancy = metrics.get(OCCUPANCY)
    tensor = max((v for v in (metrics.get(TENSOR_HMMA), metrics.get(TENSOR_GMMA)) if v is not None), default=None)
    if dram is not None and dram >= BUSY and (sm is None or dram >= sm):
        return "memory", "DRAM is the busiest unit: move fewer bytes (fuse, reuse from shared memory, narrower types)"
    if sm is not None and sm >= BUSY:
        if tensor is not None and tensor < 10.0:
            return "compute", "the SMs are busy but the tensor pipes idle: the math runs on FMA units (tl.dot on tensor cores?)"
        return "compute", "the SMs are the busiest unit: fewer instructions, or tensor cores for the products"
    if (dram is None or dram < IDLE) and (sm is None or sm < IDLE):
        if occupancy is not None and occupancy < LOW_ACHIEVED_OCCUPANCY:
            return "latency", (f"both DRAM and SMs under {IDLE:.0f}% with {occupancy:.0f}% achieved occupancy: "
                               "more warps in flight (more programs, fewer registers or less shared memory per program)")
        return "latency", f"both DRAM and SMs under {IDLE:.0f}%: too little independent work in flight per SM"
    return "balanced", "no unit saturated: look at the stall reasons (ncu --set full) for what the warps wait on"


def _fmt(value: float | None, suffix: str = "%") -> str:
    return "n/a" if value is None else f"{value:.0f}{suffix}"


def ncu_findings(records: list[dict[str, Any]]) -> list[DiagnosticFinding]:
    """One finding per kernel: throughputs, occupancy and tensor-pipe use, and what they say."""
    findings = []
    for kernel in _aggregate(records):
        m = kernel["metrics"]
        tensor = max((v for v in (m.get(TENSOR_HMMA), m.get(TENSOR_GMMA)) if v is not None), default=None)
        verdict, direction = _verdict(m)
        title = (f"{kernel['name'][:60]}: DRAM {_fmt(m.get(DRAM))}, SM {_fmt(m.get(SM))}, achieved occupancy "
                 f"{_fmt(m.get(OCCUPANCY))}, tensor pipes {_fmt(tensor)} (ncu)")
        evidence = [f"{kernel['launches']} launch(es) profiled"
                    + (f", {kernel['duration']:.4g} {kernel['duration_unit']} in all" if kernel["duration"] is not None else ""),
                    "Nsight Compute, one warm forward, clocks not locked (--clock-control none)"]
        if m.get(REGISTERS) is not None:
            evidence.append(f"{m[REGISTERS]:.0f} registers per thread")
        findings.append(DiagnosticFinding("ncu", "info", title, evidence, direction=direction,
                                          data={"kernel": kernel["name"], "launches": kernel["launches"],
                                                "verdict": verdict, "metrics": m, "duration": kernel["duration"],
                                                "duration_unit": kernel["duration_unit"]}))
    return findings
