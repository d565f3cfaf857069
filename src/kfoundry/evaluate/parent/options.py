"""The settings of an evaluation, with their defaults and validation."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kfoundry.errors import UsageError
from kfoundry.problem import DEFAULT_TOLERANCE, PRECISIONS

# compile-MODE is torch.compile(mode=MODE)
BASELINE_NAMES = ("eager", "compile", "compile-max-autotune", "compile-max-autotune-no-cudagraphs",
                  "compile-reduce-overhead")
# torch.compile's mode with CUDA graphs: timed beside a best that replays its kernels from one
GRAPH_BASELINE = "compile-reduce-overhead"
SANDBOX_MODES = ("on", "strict", "off")
MEMORY_TIERS = ("auto", "resident", "host", "per-set")  # kfoundry.evaluate.parent.memory_plan's tiers, as typed


VERDICT_FIELDS = ("device", "precision", "trials", "tolerance", "timeout_s", "seed", "eval_mode", "timing_trials",
                  "baselines", "policy")


@dataclass
class EvalOptions:
    device: str | None = None  # None: CUDA when available, else CPU
    precision: str = "fp32"
    trials: int = 5
    tolerance: float | None = None  # None: the precision's default (atol = rtol)
    timeout_s: float = 300.0  # per candidate evaluation
    seed: int | None = None  # None: unpredictable trial seeds (recorded in the result)
    eval_mode: bool = False
    set_values: dict[str, Any] = field(default_factory=dict)
    timing_trials: int = 100
    timing_budget_s: float = 10.0  # per timed callable: fewer trials when one run is long
    baselines: tuple[str, ...] = ("eager", "compile")
    no_cache: bool = False
    wrapper: list[str] | None = None  # a command to run the candidate's worker under
    cache_dir: Path | None = None  # None: kfoundry.paths.cache_dir()
    reference_timeout_s: float = 1800.0
    measure_device: bool = True
    memory_limit_bytes: int | None = None  # host memory the evaluator may plan for; None: what is free
    workers: int | None = None  # candidates evaluated at once; None: sized by CPU cores and free memory
    memory_tier: str = "auto"  # where the judge keeps the expected outputs; auto: the best that fits
    private_paths: tuple[str, ...] = ()  # what candidates may never read, beyond what the sandbox knows (a run folder)
    transport: str = "ipc"  # GPU: how outputs reach the judge ("ipc": CUDA IPC, no copy; "file")
    policy: str = "strict"  # strict: all computation in the candidate's kernels; permissive: PyTorch compute warns
    ncu: bool = False  # GPU: re-run a working candidate under Nsight Compute for the diagnosis
    sanitize: bool = False  # GPU: re-run a crashing or wrong candidate under compute-sanitizer memcheck
    guard: bool = True  # False only to judge plain correctness (harness tests, the reference against itself)
    # False: the worker skips the guard's extra runs (kernels off, new data in the same tensors, the same data in
    # new tensors, outliers) and on a GPU the kernel profile they end with; the guard still judges the source and
    # what the trials ran (tests that judge a candidate's correctness, in half the interpreted runs)
    guard_runs: bool = True
    sandbox: str = "on"  # on: every restriction the kernel has, a warning for the rest; strict: all or refuse; off
    # CPU: compile each Triton kernel as launched for this compute capability ("9.0") and report its registers,
    # spills and shared memory (target_compile.py); None: not derived (a few seconds a kernel: LLM runs ask for it)
    static_target: str | None = None

    def verdict_settings(self) -> dict[str, Any]:
        """The options that change a verdict or a figure (VERDICT_FIELDS), as JSON: what a run keeps and a
        bench's fingerprint covers; not where caches live, nor how the work is spread."""
        data = {name: getattr(self, name) for name in VERDICT_FIELDS}
        data["baselines"] = list(data["baselines"])
        return data

    @property
    def forced_tier(self) -> str | None:
        """The memory plan's tier this option forces (None: auto)."""
        return None if self.memory_tier == "auto" else self.memory_tier.replace("-", "_")

    @property
    def atol(self) -> float:
        return self.tolerance if self.tolerance is not None else DEFAULT_TOLERANCE[self.precision]

    def validate(self) -> None:
        if self.precision not in PRECISIONS:
            raise UsageError(f"unknown precision {self.precision!r}: use one of {', '.join(PRECISIONS)}")
        if self.trials < 1:
            raise UsageError("--trials must be at least 1")
        if self.timing_trials < 1:
            raise UsageError("timing trials must be at least 1")
        if self.tolerance is not None and not self.tolerance > 0:
            raise UsageError("--tolerance must be a positive number")
        if self.workers is not None and self.workers < 1:
            raise UsageError("--workers must be at least 1")
        if self.memory_limit_bytes is not None and self.memory_limit_bytes < (256 << 20):
            raise UsageError("--memory-limit must be at least 0.25 GB")
        if self.memory_tier not in MEMORY_TIERS:
            raise UsageError(f"unknown memory tier {self.memory_tier!r}: use one of {', '.join(MEMORY_TIERS)}")
        if self.transport not in ("ipc", "file"):
            raise UsageError(f"unknown transport {self.transport!r}: use ipc or file")
        if self.sandbox not in SANDBOX_MODES:
            raise UsageError(f"unknown sandbox mode {self.sandbox!r}: use {', '.join(SANDBOX_MODES)}")
        if self.timeout_s <= 0:
            raise UsageError("--timeout must be a positive number of seconds")
        from kfoundry.guard.policy import check_policy

        check_policy(self.policy)
        unknown = [b for b in self.baselines if b not in BASELINE_NAMES]
        if unknown:
            raise UsageError(f"unknown baseline(s) {', '.join(unknown)}: choose from {', '.join(BASELINE_NAMES)}")


def resolve_device(device: str | None, precision: str) -> str:
    """'cpu', or 'cuda:N' for a GPU that exists; bf16 is refused on CPU."""
    import torch

    if device is None or device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        if precision == "bf16":
            raise UsageError(
                "bf16 on CPU is refused: Triton's interpreter computes bf16 wrongly (it holds bf16 as uint16); "
                "use --precision fp32 or fp16 on CPU, or bf16 on a GPU"
            )
        return "cpu"
    if device == "cuda" or device.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise UsageError(f"--device {device}: no CUDA GPU is available on this machine (use --device cpu)")
        # "cuda" is the first visible GPU: this process never selects one, and asking torch which it has
        # (current_device) initializes CUDA here, in the process that must not touch the GPU
        index = int(device.split(":", 1)[1]) if ":" in device else 0
        if not 0 <= index < torch.cuda.device_count():
            raise UsageError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
        return f"cuda:{index}"
    raise UsageError(f"unknown device {device!r}: use cpu, cuda or cuda:N")
