"""Failures that are the environment's, not the code's under test: an import of our package or an installed
one that fails (unreadable, broken, not visible to a worker), CUDA that cannot start, GPU memory that another
process holds, a worker that ends before any code under test ran. Read in the parent from what a process
left (its traceback text, its stderr, its phase), never from a live exception: the judge, the baseline
process and a candidate's worker are all judged the same way.

The rule that keeps a candidate's own fault its own: a failure is the environment's only where the failing
frame, or the file that could not be read, is outside the code under test (the candidate's file and its
folder, or the problem's file and its folder) and inside an installed package or our own; or where the
process ended before that code ran at all. A module the code under test imports itself counts against it
unless this Python finds that module (then the worker, not the code, cannot see it).
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kfoundry.errors import EnvironmentFault
from kfoundry.paths import inside

if TYPE_CHECKING:
    from kfoundry.evaluate.parent.process import WorkerOutcome
    from kfoundry.gpu_usage import GpuMemory, GpuUsage

GIB = 1 << 30
# what CUDA (the driver, the runtime, torch's wrappers of them) says when it cannot start at all; a kernel's
# own faults (illegal memory access, launch failures) say none of these
CUDA_START_PHRASES = (
    "cuinit", "cuda driver initialization failed", "no cuda-capable device is detected",
    "found no nvidia driver on your system", "the nvidia driver on your system is too old",
    "cuda driver version is insufficient for cuda runtime version", "no cuda gpus are available",
    "cuda unknown error - this may be due to an incorrectly set up environment",
    "unexpected error from cudagetdevicecount", "cuda error: initialization error",
    "forward compatibility was attempted on non supported hw",
    "system has unsupported display driver / cuda driver combination",
    "cuda_error_no_device", "cudaerrornodevice", "cudaerrorinsufficientdriver",
)
DOCTOR = "`kfoundry doctor` checks the machine step by step"
# another process's share of a GPU that matters: a display server's few MB do not
OTHERS_MIN_BYTES = 256 << 20


# -- tracebacks, as text ------------------------------------------------------------------------------

@dataclass
class Frame:
    file: str
    line: int
    function: str  # "" for a SyntaxError's location


@dataclass
class Block:
    """One exception of a traceback's chain: its frames, outermost first, and its last line."""

    frames: list[Frame] = field(default_factory=list)
    exception: str = ""  # the type's name, without its module
    message: str = ""


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<function>.+))?\s*$')
_EXCEPTION = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<message>.*))?$")


def parse_traceback(text: str) -> list[Block]:
    """The chain of a formatted traceback (`traceback.format_exception`), innermost cause first; a text that
    was cut from its start still gives its last blocks."""
    blocks: list[Block] = []
    current = Block()
    for raw in text.splitlines():
        if raw.startswith("Traceback (most recent call last)"):
            current = Block()
            continue
        frame = _FRAME.match(raw)
        if frame:
            current.frames.append(Frame(frame["file"], int(frame["line"]), frame["function"] or ""))
            continue
        if raw[:1].strip() and current.frames and not current.exception:
            match = _EXCEPTION.match(raw.strip())
            if match and (match["message"] is not None or raw.strip() == match["type"]):
                current.exception = match["type"].rsplit(".", 1)[-1]
                current.message = (match["message"] or "").strip()
                blocks.append(current)
                current = Block()
    return blocks


def last_error_line(text: str) -> str:
    """The line a person reads first in a process's output: its last exception, else its last line."""
    blocks = parse_traceback(text)
    if blocks:
        block = blocks[-1]
        return f"{block.exception}: {block.message}" if block.message else block.exception
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


# -- where files are ------------------------------------------------------------------------------------

def _real(path: str) -> str:
    return os.path.realpath(path)


def _transparent(file: str) -> bool:
    """Frames of the import machinery, which only carry an import to the frame that asked for it."""
    if file.startswith("<frozen ") or file.startswith("<"):
        return True
    parts = Path(file).parts
    return len(parts) >= 2 and parts[-2] == "importlib" and parts[-1] in ("__init__.py", "_bootstrap.py",
                                                                          "_bootstrap_external.py")


def import_roots() -> list[str]:
    """Where installed code lives: Python's prefixes (the standard library, site-packages), our package's
    folder, and the entries of the import path (not the working directory: that is the user's)."""
    import kfoundry

    roots = [sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(kfoundry.__file__).resolve().parent)]
    roots += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    cwd = os.getcwd()
    roots += [p for p in sys.path if p and _real(p) != _real(cwd)]
    return list(dict.fromkeys(roots))


def package_of(file: str) -> tuple[str, str]:
    """(the top-level package or module a file belongs to, the folder it is imported from)."""
    path = Path(file)
    folder = path.parent
    if not (folder / "__init__.py").exists() and path.name != "__init__.py":
        return path.name.split(".")[0], str(folder)
    while (folder.parent / "__init__.py").exists():
        folder = folder.parent
    return folder.name, str(folder.parent)


def found_here(name: str) -> str | None:
    """Where this Python finds a top-level module (without importing it), None where it does not; the
    working directory does not count (a worker does not import from ours)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError, AttributeError):
        return None
    if spec is None:
        return None
    origin = spec.origin if spec.origin not in (None, "built-in", "frozen") else None
    where = origin or next(iter(spec.submodule_search_locations or []), None)
    if where:
        folder = Path(where).parent.parent if Path(where).name == "__init__.py" else Path(where).parent
        if _real(str(folder)) == _real(os.getcwd()):
            return None  # found through the working directory on our sys.path
    return where or name


# -- imports that fail ----------------------------------------------------------------------------------

@dataclass
class ImportFailure:
    """An import that failed for the environment: `kind` is unreadable (the sandbox or the file's
    permissions), broken (an installed package's own code fails as it loads), not_visible (this Python
    finds the module, the process did not) or missing (not installed at all, and needed by our own code)."""

    kind: str
    module: str
    file: str
    folder: str
    line: str  # the exception, as printed

    def fault(self, process: str) -> EnvironmentFault:
        where = f"{self.file}" if self.file else self.module
        if self.kind == "unreadable":
            target = _real(self.file) if self.file else ""
            folder = self.folder
            if target and target != os.path.abspath(self.file):  # a link: what cannot be read is where it leads
                where += f" (a link to {target})"
                folder = os.path.dirname(target)
            return EnvironmentFault(
                f"{process} cannot read {where} (package {self.module}, from {self.folder}): {self.line}",
                f"make {folder} readable to kfoundry's workers, or install {self.module} into this Python "
                f"environment (pip install {self.module}); a sandboxed worker reads Python's own folders, "
                f"kfoundry's and the import path. {DOCTOR}")
        if self.kind == "missing":
            return EnvironmentFault(f"{process} cannot import {self.module}, which this Python environment lacks: "
                                    f"{self.line}",
                                    f"install it (pip install {self.module}), or reinstall kfoundry with its "
                                    f"dependencies (pip install -e .). {DOCTOR}")
        if self.kind == "not_visible":
            return EnvironmentFault(
                f"{process} cannot import {self.module}, which this Python finds at {where}: {self.line}",
                f"install {self.module} into this Python environment (pip install {self.module}) or make "
                f"{self.folder} readable to kfoundry's workers. {DOCTOR}")
        return EnvironmentFault(
            f"{process} failed while importing {self.module} ({where}): {self.line}",
            f"{self.module} in {self.folder} is broken or does not match its dependencies: reinstall it "
            f"(pip install --force-reinstall {self.module}; `pip check` names mismatched versions), or take "
            f"the copy that shadows it off PYTHONPATH. {DOCTOR}")


_NO_MODULE = re.compile(r"No module named '([^']+)'")
_DENIED = re.compile(r"\[Errno (?:13|1)\][^']*'([^']+)'")
MODULE_SUFFIXES = (".py", ".pyc", ".so", ".pyd", ".pth")


def _module_file(path: str) -> bool:
    return path.endswith(MODULE_SUFFIXES) or os.path.isdir(path)


def import_failure(traceback_text: str, own: Iterable[str] | None = ()) -> ImportFailure | None:
    """The environment's import failure in a traceback, or None where there is none or the failing import
    is the code under test's own (`own`: its files and folders; None where no code under test ran at all,
    so that every failing import is the environment's)."""
    before_code = own is None
    own = [p for p in own or () if p]
    for block in reversed(parse_traceback(traceback_text)):  # the outermost exception first
        failure = _started_failure(block) if before_code else _block_failure(block, own)
        if failure is not None:
            return failure
    return None


def _started_failure(block: Block) -> ImportFailure | None:
    """An import that failed before any code under test ran: whatever file it was, it is ours or installed."""
    line = f"{block.exception}: {block.message}" if block.message else block.exception
    missing = _NO_MODULE.search(block.message) if block.exception == "ModuleNotFoundError" else None
    if missing is not None:
        name = missing.group(1)
        where = found_here(name.split(".")[0])
        if where is None:
            return ImportFailure("missing", name.split(".")[0], "", "", line)
        package, folder = package_of(where)
        # a part of a package missing is a broken install; the package itself, one the process cannot see
        return ImportFailure("broken" if "." in name else "not_visible", package, where, folder, line)
    if block.exception in ("ModuleNotFoundError", "ImportError", "SyntaxError"):
        frames = [f for f in block.frames if not _transparent(f.file)]
        if frames:
            package, folder = package_of(frames[-1].file)
            return ImportFailure("broken", package, frames[-1].file, folder, line)
        return None
    denied = _DENIED.search(block.message) if block.exception in ("PermissionError", "OSError") else None
    if denied is not None and _module_file(denied.group(1)):
        package, folder = package_of(denied.group(1))
        return ImportFailure("unreadable", package, denied.group(1), folder, line)
    return None


def _block_failure(block: Block, own: list[str]) -> ImportFailure | None:
    frames = [f for f in block.frames if not _transparent(f.file)]
    innermost = frames[-1] if frames else None
    in_own_code = innermost is None or inside(innermost.file, own)
    line = f"{block.exception}: {block.message}" if block.message else block.exception
    if block.exception in ("ModuleNotFoundError", "ImportError"):
        missing = _NO_MODULE.search(block.message)
        name = missing.group(1) if missing else ""
        if in_own_code:
            # the code's own import: its fault, unless the module is one this Python has (the worker cannot see it)
            where = found_here(name) if block.exception == "ModuleNotFoundError" and name and "." not in name \
                else None
            if where is None:
                return None
            _, folder = package_of(where) if os.path.exists(where) else (name, "")
            return ImportFailure("not_visible", name, where, folder, line)
        if inside(innermost.file, own) or not inside(innermost.file, import_roots()):
            return None
        if name and found_here(name.split(".")[0]) is None:
            return None  # an optional dependency not installed at all: the feature the code chose needs it
        if "undefined symbol" in block.message and any(p in block.message for p in own):
            return None  # the code's own extension, built in its folder
        package, folder = package_of(innermost.file)
        return ImportFailure("broken", package, innermost.file, folder, line)
    if block.exception in ("PermissionError", "OSError"):
        denied = _DENIED.search(block.message)
        if denied is None or (innermost is not None and inside(innermost.file, own)):
            return None
        path = denied.group(1)
        if inside(path, own) or not _module_file(path):
            return None  # a data file, or the code's own: what it asked for
        package, folder = package_of(path)
        return ImportFailure("unreadable", package, path, folder, line)
    if block.exception == "SyntaxError" and block.frames:
        where = block.frames[-1]  # the location line SyntaxError prints
        if where.function or inside(where.file, own) or not inside(where.file, import_roots()):
            return None
        package, folder = package_of(where.file)
        return ImportFailure("broken", package, where.file, folder, line)
    return None


# -- CUDA that cannot start ------------------------------------------------------------------------------

def cuda_start_failure(text: str) -> str | None:
    """The line where CUDA says it cannot start, or None."""
    for raw in reversed(text.splitlines()):
        lowered = raw.lower()
        if any(phrase in lowered for phrase in CUDA_START_PHRASES):
            return raw.strip()
    return None


def cuda_fault(process: str, line: str) -> EnvironmentFault:
    return EnvironmentFault(
        f"CUDA could not start in {process}: {line}",
        "check that the NVIDIA driver is loaded and new enough for this torch's CUDA (nvidia-smi; python -c "
        "'import torch; print(torch.version.cuda); torch.zeros(1, device=\"cuda\")'), that CUDA_VISIBLE_DEVICES "
        f"names a GPU that exists, or run on the CPU with --device cpu. {DOCTOR}")


# -- GPU memory held by others ----------------------------------------------------------------------------

def our_pids(root: int | None = None) -> set[int]:
    """This process and every process it started, however deep (workers, fork servers' children)."""
    root = os.getpid() if root is None else root
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            parents[int(entry.name)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    ours = {root}
    changed = True
    while changed:
        changed = False
        for pid, parent in parents.items():
            if parent in ours and pid not in ours:
                ours.add(pid)
                changed = True
    return ours


def gpus_of(device: str, usage: GpuUsage) -> list[GpuMemory]:
    """The GPUs (as NVML numbers them) that `device` may be: CUDA_VISIBLE_DEVICES maps cuda:N, NVML does not."""
    if not device.startswith("cuda"):
        return []
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if not visible:
        return [g for g in usage.gpus if g.index == index] or list(usage.gpus)
    if index >= len(visible):
        return list(usage.gpus)
    chosen = visible[index]
    if chosen.isdigit():
        return [g for g in usage.gpus if g.index == int(chosen)] or list(usage.gpus)
    return [g for g in usage.gpus if g.uuid.startswith(chosen)] or list(usage.gpus)


def others_on(gpus: list[GpuMemory], ours: set[int]) -> list[tuple[GpuMemory, object]]:
    """Processes, not ours, that hold memory on these GPUs. Only processes visible here count: inside a
    container NVML may give the host's pids, and ours would then look like strangers."""
    return [(gpu, p) for gpu in gpus for p in gpu.processes
            if p.pid not in ours and os.path.exists(f"/proc/{p.pid}")]


def describe_holders(gpus: list[GpuMemory], ours: set[int]) -> str:
    """A GPU's free memory and every process that holds some, ours marked."""
    parts = []
    for gpu in gpus:
        held = [f"{p.describe()}{' (kfoundry)' if p.pid in ours else ''}" for p in gpu.processes]
        parts.append(gpu.describe() + ("; " + "; ".join(held) if held else "; no process listed"))
    return " | ".join(parts)


_TRIED = re.compile(r"tried to allocate ([\d.]+) ?(b|kib|mib|gib|tib|kb|mb|gb|tb)\b", re.IGNORECASE)
_UNITS = {"b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
          "kb": 1000, "mb": 1000 ** 2, "gb": 1000 ** 3, "tb": 1000 ** 4}


def requested_bytes(text: str) -> int | None:
    match = _TRIED.search(text)
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()]) if match else None


def is_gpu_out_of_memory(text: str) -> bool:
    lowered = text.lower()
    return "out of memory" in lowered and ("cuda" in lowered or "gpu" in lowered)


@dataclass
class GpuMemoryVerdict:
    """What an out-of-memory on a GPU says of who holds its memory: `holders` for the message; `fault` where
    other processes hold what the allocation needed."""

    holders: str
    fault: EnvironmentFault | None


def gpu_out_of_memory(text: str, device: str, process: str, usage: GpuUsage | None = None,
                      ours: set[int] | None = None, need_known: bool = False) -> GpuMemoryVerdict:
    """An out-of-memory on `device` seen in `process`: the GPU's holders (NVML), and an EnvironmentFault where
    processes not ours hold at least OTHERS_MIN_BYTES and the allocation would have fit without them
    (`need_known`: only where the message says how much was asked, as a candidate's must)."""
    if usage is None:
        from kfoundry.gpu_usage import gpu_usage

        usage = gpu_usage()
    if not usage.available:
        return GpuMemoryVerdict(f"who holds the GPU's memory is unknown ({usage.reason})", None)
    ours = our_pids() if ours is None else ours
    gpus = gpus_of(device, usage)
    holders = describe_holders(gpus, ours)
    others = others_holding(gpus, ours)
    need = requested_bytes(text)
    free = sum(g.free_bytes for g in gpus)
    fits = need <= free + others.held if need is not None else not need_known
    if others.held < OTHERS_MIN_BYTES or not fits:
        return GpuMemoryVerdict(holders, None)
    asked = f" (it asked for {need / GIB:.2f} GiB)" if need is not None else ""
    return GpuMemoryVerdict(holders, others.fault(f"{process} ran out of GPU memory{asked}"))


@dataclass
class OthersHolding:
    """The processes, not ours, that hold memory on a device's GPUs, and how much in all."""

    processes: list[tuple[GpuMemory, object]]
    held: int

    def fault(self, what: str) -> EnvironmentFault:
        """`what` happened while they hold the memory: the environment's fault, naming each of them."""
        names = "; ".join(f"GPU {gpu.index}: {p.describe()}" for gpu, p in self.processes)
        return EnvironmentFault(
            f"{what} while other processes hold {self.held / GIB:.2f} GiB of it: {names}",
            "stop those processes or wait for them, or choose a free GPU with --device cuda:N "
            f"({DOCTOR} and lists the GPUs with who holds their memory)")


def others_holding(gpus: list[GpuMemory], ours: set[int]) -> OthersHolding:
    strangers = others_on(gpus, ours)
    return OthersHolding(strangers, sum(p.used_bytes or 0 for _, p in strangers))


def others_on_device(device: str) -> OthersHolding:
    """What processes not ours hold on `device` now (nothing where NVML cannot tell)."""
    from kfoundry.gpu_usage import gpu_usage

    usage = gpu_usage()
    if not usage.available:
        return OthersHolding([], 0)
    return others_holding(gpus_of(device, usage), our_pids())


# -- processes that end before the code under test ran -----------------------------------------------------

def start_fault(process: str, died: str, output: str, detail: str = "") -> EnvironmentFault:
    """A process of ours that ended before any code under test ran: the cause its output names."""
    text = "\n".join(filter(None, [detail, output]))
    failure = import_failure(text, None)
    if failure is not None:
        return failure.fault(process)
    cuda = cuda_start_failure(text)
    if cuda is not None:
        return cuda_fault(process, cuda)
    said = last_error_line(text)
    return EnvironmentFault(
        f"{process} {died} before it ran any code under test" + (f": {said}" if said else ""),
        "run `kfoundry doctor`: it starts a sandboxed worker the way an evaluation does and names what fails "
        "(its imports, the sandbox, CUDA)")


def died(outcome: WorkerOutcome) -> str:
    if outcome.signal_name:
        return f"was killed by {outcome.signal_name}"
    return f"exited with code {outcome.returncode}"


CANDIDATE_PROCESS = "a candidate's worker process"


def candidate_fault(outcome: WorkerOutcome, device: str, own: Iterable[str]) -> EnvironmentFault | None:
    """The environment's fault in a candidate's worker outcome, or None where the verdict is the candidate's.
    `own`: the candidate's copy and its worker's folder (what the candidate wrote there, extensions included)."""
    if outcome.timed_out or outcome.out_of_memory_bytes:
        return None
    result = outcome.result
    own = list(own)
    if result is None or "internal_error" in result:
        detail = str((result or {}).get("internal_error") or "")
        if outcome.phase in ("start", "ready"):  # no phase of the candidate's own: none of its code ran
            text = "\n".join(filter(None, [str((result or {}).get("traceback") or ""), outcome.stderr_tail]))
            return start_fault(CANDIDATE_PROCESS, died(outcome), text, detail)
        cuda = cuda_start_failure(detail + "\n" + outcome.stderr_tail)
        return cuda_fault(CANDIDATE_PROCESS, cuda) if cuda else None
    if result.get("status") not in ("compile_error", "runtime_error"):
        return None
    error = result.get("error") or {}
    failure = import_failure(str(error.get("traceback") or ""), own)
    if failure is not None:
        return failure.fault(CANDIDATE_PROCESS)
    text = f"{result.get('message', '')}\n{error.get('message', '')}"
    cuda = cuda_start_failure(text)
    if cuda is not None:
        return cuda_fault(CANDIDATE_PROCESS, cuda)
    if device.startswith("cuda") and is_gpu_out_of_memory(text):
        return gpu_out_of_memory(text, device, CANDIDATE_PROCESS, need_known=True).fault
    return None
