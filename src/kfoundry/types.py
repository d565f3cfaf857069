"""Shared value types: plain dataclasses, serializable to JSON with `to_dict`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

STATUSES = ("ok", "compile_error", "runtime_error", "wrong_output", "cheating", "timeout", "crash")
PHASES = ("start", "load", "init", "compile", "correctness", "guard", "timing")


def to_jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, float) and value != value:  # NaN is not JSON
        return None
    return value


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """The items of `data` that are fields of `cls` (a record from a newer version may hold more)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclass
class ProblemCost:
    """What the problem must compute and move, measured once on the reference."""

    flops: int | None
    input_bytes: int
    output_bytes: int
    parameter_bytes: int
    flop_counter: str = "torch.utils.flop_counter"
    conv_flops: int | None = None  # of flops, those of convolutions (None: not counted)

    @property
    def min_bytes(self) -> int:
        """Inputs read once and outputs written once (parameters listed apart)."""
        return self.input_bytes + self.output_bytes

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProblemCost:
        return cls(**_known(cls, data))


@dataclass
class DeviceFacts:
    kind: str  # "cuda" or "cpu"; a prompt's stand-in for a CPU run: "target" or "typical target" (datasheet)
    name: str
    uuid: str | None = None
    sm_count: int | None = None
    l2_bytes: int | None = None
    shared_memory_per_block_bytes: int | None = None
    shared_memory_per_sm_bytes: int | None = None
    memory_bytes: int | None = None
    peak_bandwidth_gbs: float | None = None
    peak_tflops: dict[str, float] = field(default_factory=dict)
    source: str = ""  # how the peaks were obtained: measured, datasheet, none
    registers_per_sm: int | None = None  # 32-bit registers
    max_registers_per_thread: int | None = None
    compute_capability: str | None = None  # "9.0"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeviceFacts:
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class ReferenceRounding:
    """How the reference itself rounds, as the judge saw it when it prepared the problem: e(r), its error ratio
    against the float64 truth on the first set (None without a truth), and whether its convolutions run TF32
    (cuDNN on a GPU of compute capability 8 or more: PyTorch's default)."""

    error_ratio: float | None = None
    conv_tf32: bool = False

    def tf32_level(self) -> bool:
        """A verdict allows a TF32 main loop's error here: the reference's convolutions are TF32 too, or its
        error is already at least the tolerance's (the limit max(1, 2 e(r)) is then twice it)."""
        return self.conv_tf32 or (self.error_ratio is not None and self.error_ratio >= 1.0)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ReferenceRounding:
        return cls(**_known(cls, data or {}))


@dataclass
class SizeCheck:
    """The generalisation check: the candidate judged again at a second size set of the problem
    (kfoundry.size_sets). `holds` is None where it could not be judged there (`message` says why)."""

    verified_at: dict[str, Any] = field(default_factory=dict)  # the first verdict's size constants
    other: dict[str, Any] = field(default_factory=dict)  # the second set's changed constants
    holds: bool | None = None
    status: str = ""  # the verdict at the second set
    message: str = ""

    def summary(self) -> str:
        """'holds at other sizes: yes / no (which, why)', as the CLI, the report and best.py say it."""
        sizes = ", ".join(f"{name}={value}" for name, value in self.other.items())
        if self.holds is None:
            return f"holds at other sizes: not checked ({self.message})"
        if self.holds:
            return f"holds at other sizes: yes ({sizes})"
        return f"holds at other sizes: no ({sizes}: {self.status}: {self.message})"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SizeCheck:
        return cls(**_known(cls, data))


@dataclass
class CorrectnessReport:
    trials: int = 0
    trials_passed: int = 0
    seeds: list[int] = field(default_factory=list)
    init_seed: int | None = None
    tolerance: float = 0.0
    precision: str = "fp32"
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    mismatch_fraction: float | None = None
    first_bad_index: list[int] | None = None
    error_ratio_candidate: float | None = None  # e(c): error against the float64 truth, in tolerance units
    error_ratio_reference: float | None = None  # e(r): the PyTorch reference's own error
    ground_truth: str = ""  # "float64" or the reason it is unavailable
    failed_trial: int | None = None
    failed_output: int | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CorrectnessReport:
        return cls(**_known(cls, data))


@dataclass
class TimingStats:
    median_ms: float
    q1_ms: float
    q3_ms: float
    min_ms: float
    max_ms: float
    trials: int
    host_flagged_trials: int = 0
    event_median_ms: float | None = None  # CUDA events alone
    host_median_ms: float | None = None  # host clock alone, less the empty-region overhead
    # host clock from the lead's launch until the call returned (its work queued): above the lead, the GPU waited
    # for the host inside the events (a busy or slow host lengthens the time)
    enqueue_median_ms: float | None = None
    lead_ms: float | None = None  # the GPU's spin before each trial's start event, fitted to the host's queueing
    warmup_runs: int | None = None
    warmup_s: float | None = None
    setup_s: float | None = None  # a baseline's first call before its timing: torch.compile's compilation
    sm_clock_mhz: list[int | None] | None = None  # SM clock (NVML) before and after the timed trials

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TimingStats:
        return cls(**_known(cls, data))


@dataclass
class TimingReport:
    runtime_ms: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    trials: int | None = None
    statistic: str = "median"
    device: str | None = None
    device_uuid: str | None = None
    torch_version: str | None = None
    triton_version: str | None = None
    method: str = ""
    candidate: TimingStats | None = None
    baselines: dict[str, TimingStats | None] = field(default_factory=dict)
    baseline_errors: dict[str, str] = field(default_factory=dict)
    baselines_cached: bool = False
    baselines_pending: list[str] = field(default_factory=list)  # measured after this verdict was given
    candidate_peak_memory_bytes: int | None = None
    reference_peak_memory_bytes: int | None = None
    reason: str | None = None  # why timing is missing

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TimingReport:
        fields = _known(cls, data)
        if fields.get("candidate") is not None:
            fields["candidate"] = TimingStats.from_dict(fields["candidate"])
        fields["baselines"] = {name: TimingStats.from_dict(stats) if stats is not None else None
                               for name, stats in (fields.get("baselines") or {}).items()}
        return cls(**fields)


SEVERITIES = ("error", "warning", "info")  # most important first
FOCUSES = ("repair", "memory", "compute", "fusion", "algorithm", "launch", "none")


@dataclass
class SourceLocation:
    """Where in the candidate a finding points: 1-based line (and column) of its file."""

    file: str | None = None
    line: int | None = None
    column: int | None = None
    text: str | None = None  # the line's text, stripped
    function: str | None = None  # the Python function or CUDA/Triton kernel it lies in


@dataclass
class DiagnosticFinding:
    """One precise statement about an evaluation: what, how sure, the evidence, where, what next."""

    category: str  # e.g. syntax, import, triton-compile, nvcc, runtime, cuda-fault, out-of-memory, timeout,
    #                shape, wrong-values, error-pattern, nan, precision, race, cheating, roofline, bound,
    #                kernels, baseline, triton-metadata, ncu, sanitizer, lint
    severity: str  # one of SEVERITIES
    title: str  # one line
    evidence: list[str] = field(default_factory=list)
    location: SourceLocation | None = None
    direction: str = ""  # the suggested next step
    data: dict[str, Any] = field(default_factory=dict)  # the numbers behind it, machine-readable


@dataclass
class Diagnosis:
    """Everything an evaluation says about a candidate, for the next step (person, expert, router)."""

    status: str
    summary: str
    findings: list[DiagnosticFinding] = field(default_factory=list)
    focus: str = "none"  # the concern the next expert should take: one of FOCUSES
    bound: str | None = None  # memory, compute, launch or latency (GPU, when timed)

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Diagnosis":
        findings = []
        for item in data.get("findings", []):
            item = dict(item)
            location = item.pop("location", None)
            findings.append(DiagnosticFinding(**item, location=SourceLocation(**location) if location else None))
        return cls(status=data["status"], summary=data.get("summary", ""), findings=findings,
                   focus=data.get("focus", "none"), bound=data.get("bound"))


@dataclass
class Evaluation:
    status: str
    message: str
    phase: str | None = None
    correctness: CorrectnessReport = field(default_factory=CorrectnessReport)
    timing: TimingReport = field(default_factory=TimingReport)
    warnings: list[str] = field(default_factory=list)
    problem: str = ""
    candidate: str = ""
    device: str = ""
    error: dict[str, Any] | None = None  # structured error details: type, file, line, text, traceback
    guard: dict[str, Any] = field(default_factory=dict)  # policy, findings, warnings, what ran
    cost: ProblemCost | None = None
    device_facts: DeviceFacts | None = None
    reference_rounding: ReferenceRounding | None = None  # how the judge saw the reference round (the floor reads it)
    settings: dict[str, Any] = field(default_factory=dict)
    durations_s: dict[str, float] = field(default_factory=dict)
    # evidence for the diagnosis, gathered where the data live (worker, parent's comparison)
    error_pattern: dict[str, Any] | None = None  # kfoundry.diagnose.numeric.error_pattern of the failing output
    repeat: dict[str, Any] | None = None  # kfoundry.diagnose.numeric.nondeterminism: the same run twice
    profile: dict[str, Any] = field(default_factory=dict)  # GPU: kernels (name, stream, time), triton metadata
    tools: dict[str, Any] = field(default_factory=dict)  # raw output of ncu / compute-sanitizer re-runs
    sandbox: dict[str, Any] = field(default_factory=dict)  # what held in the worker (kfoundry.sandbox.policy)
    # how its precision was checked: on the GPU, or emulated on the CPU (kfoundry.evaluate.worker.emulated_precision)
    precision: dict[str, Any] = field(default_factory=dict)
    other_sizes: SizeCheck | None = None  # --check-sizes: the candidate judged again at a second size set
    diagnosis: Diagnosis | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Evaluation:
        """The inverse of `to_dict` (what crosses a process or machine boundary comes back whole)."""
        fields = _known(cls, data)
        nested = {"correctness": CorrectnessReport, "timing": TimingReport, "cost": ProblemCost,
                  "device_facts": DeviceFacts, "diagnosis": Diagnosis, "other_sizes": SizeCheck,
                  "reference_rounding": ReferenceRounding}
        for name, kind in nested.items():
            if fields.get(name) is not None:
                fields[name] = kind.from_dict(fields[name])
            elif name in ("correctness", "timing"):
                fields.pop(name, None)  # the defaults
        return cls(**fields)
