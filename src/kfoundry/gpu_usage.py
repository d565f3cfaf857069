"""Who holds GPU memory, read from the driver (NVML) without making a CUDA context: the doctor's
figures, the message of an out-of-memory that another process caused, and the check that the main
process never touches the GPU.

NVML through nvidia-ml-py (`pynvml`, NVIDIA's own binding); where it is missing or NVML does not answer
(no driver, gVisor), `nvidia-smi`'s query; where neither works, `available` is False and `reason` says
why. Nothing here imports torch.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field

MB = 1 << 20


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_bytes: int | None  # None where the driver does not say (some containers)
    name: str = ""

    def describe(self) -> str:
        used = "an unknown amount" if self.used_bytes is None else f"{self.used_bytes / (1 << 30):.2f} GiB"
        return f"pid {self.pid}{f' ({self.name})' if self.name else ''} holds {used}"


@dataclass(frozen=True)
class GpuMemory:
    index: int
    name: str
    uuid: str
    total_bytes: int
    free_bytes: int
    processes: tuple[GpuProcess, ...] = ()

    def describe(self) -> str:
        return (f"GPU {self.index} ({self.name}): {self.free_bytes / (1 << 30):.1f} of "
                f"{self.total_bytes / (1 << 30):.1f} GiB free")


@dataclass
class GpuUsage:
    """The GPUs this process can see (CUDA_VISIBLE_DEVICES is not applied: NVML lists every GPU)."""

    gpus: list[GpuMemory] = field(default_factory=list)
    source: str = ""  # "nvml" or "nvidia-smi"
    reason: str = ""  # why nothing could be read

    @property
    def available(self) -> bool:
        return bool(self.source)

    def processes(self) -> list[tuple[GpuMemory, GpuProcess]]:
        return [(gpu, p) for gpu in self.gpus for p in gpu.processes]


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            parts = f.read().split(b"\0")
    except OSError:
        return ""
    words = [p.decode(errors="replace") for p in parts if p]
    return " ".join(words)[:120]


def _from_nvml() -> GpuUsage:
    import pynvml  # nvidia-ml-py

    pynvml.nvmlInit()
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            name = pynvml.nvmlDeviceGetName(handle)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            procs = []
            for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
                try:
                    found = getattr(pynvml, getter)(handle)
                except pynvml.NVMLError:
                    continue
                for p in found:
                    used = getattr(p, "usedGpuMemory", None)
                    procs.append(GpuProcess(int(p.pid), int(used) if isinstance(used, int) else None, _name(p.pid)))
            unique = {p.pid: p for p in procs}
            gpus.append(GpuMemory(index, name.decode() if isinstance(name, bytes) else str(name),
                                  uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                                  int(memory.total), int(memory.free), tuple(unique.values())))
        return GpuUsage(gpus, "nvml")
    finally:
        pynvml.nvmlShutdown()


def _smi(query: str, fields: str) -> list[list[str]]:
    out = subprocess.run(["nvidia-smi", f"--query-{query}={fields}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=20, check=True).stdout
    return [[cell.strip() for cell in line.split(",")] for line in out.splitlines() if line.strip()]


def _number(text: str) -> int | None:
    try:
        return int(float(text))
    except ValueError:
        return None


def _from_smi() -> GpuUsage:
    rows = _smi("gpu", "index,name,uuid,memory.total,memory.free")
    apps = _smi("compute-apps", "gpu_uuid,pid,used_memory")
    gpus = []
    for index, name, uuid, total, free in rows:
        procs = tuple(GpuProcess(int(pid), None if _number(used) is None else _number(used) * MB, _name(int(pid)))
                      for gpu_uuid, pid, used in apps if gpu_uuid == uuid and pid.isdigit())
        gpus.append(GpuMemory(int(index), name, uuid, (_number(total) or 0) * MB, (_number(free) or 0) * MB, procs))
    return GpuUsage(gpus, "nvidia-smi")


def gpu_usage() -> GpuUsage:
    """What the driver says now; never raises."""
    reasons = []
    try:
        return _from_nvml()
    except ImportError:
        reasons.append("nvidia-ml-py (pynvml) is not installed")
    except Exception as exc:  # noqa: BLE001 -- NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        reasons.append(f"NVML: {exc or type(exc).__name__}")
    if shutil.which("nvidia-smi"):
        try:
            return _from_smi()
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            reasons.append(f"nvidia-smi: {exc}")
    else:
        reasons.append("no nvidia-smi on PATH")
    return GpuUsage(reason="; ".join(reasons))
