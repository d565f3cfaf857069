"""Worker side, on a CPU: what a candidate's Triton kernels would cost on the target GPU (registers, spills,
shared memory), derived without one. The interpreter runs the kernels on the CPU and compiles nothing, so a CPU
verdict has no compiled metadata; here each kernel is compiled as launched (its argument types, the alignment of
its pointers, its constants, warps and stages) for the target's compute capability, by Triton and its bundled
ptxas, and the binary's resource usage read with cuobjdump.

The interpreter replaces Triton's own library functions too, so the compile runs in a child process started
without TRITON_INTERPRET: it imports the candidate's module again (in the worker's sandbox, which its children
inherit) and stands a driver in that names the target and launches nothing. Nothing here raises: a kernel that
cannot be compiled gets a row with `error`, and the diagnosis says what was not derived."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

TIMEOUT_S = 120.0
_USAGE = re.compile(r"Function (\S+?):\s*\n\s*REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)")


def derive(module_path: Path | str, launches: dict[str, dict[str, Any]], capability: str,
           timeout_s: float = TIMEOUT_S) -> list[dict[str, Any]]:
    """One row per launched kernel, in worker.kernel_metadata's shape with "derived_for": "sm_90" (or
    {"name", "error"}), compiled for `capability` ("9.0") in a child process."""
    names = sorted(launches)
    if not names:
        return []
    usable = {name: spec for name, spec in launches.items() if spec is not None}
    rows = {name: {"name": name, "error": "an argument of a kind the compile cannot stand in for"}
            for name in names if name not in usable}
    if usable:
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        request = json.dumps({"module": str(module_path), "launches": usable, "capability": capability})
        try:
            done = subprocess.run([sys.executable, "-m", __name__], input=request, capture_output=True, text=True,
                                  env=env, timeout=timeout_s)
            answer = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else None
            if not isinstance(answer, list):
                raise RuntimeError((done.stderr.strip().splitlines() or ["no answer"])[-1])
            rows.update({row["name"]: row for row in answer if isinstance(row, dict) and "name" in row})
        except subprocess.TimeoutExpired:
            rows.update({name: {"name": name, "error": f"the compile took over {timeout_s:g} s"} for name in usable})
        except Exception as exc:  # noqa: BLE001 -- an unusable answer is a row that says so, never a failed verdict
            rows.update({name: {"name": name, "error": f"{type(exc).__name__}: {exc}"[:300]} for name in usable})
    return [rows.get(name, {"name": name, "error": "not compiled"}) for name in names]


def known_rows(known: Any, launches: dict[str, dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The rows the parent found in its cache for this very candidate (kfoundry.evaluate.parent.target_rows) and
    these very launches, or None: compile."""
    wanted = json.loads(json.dumps(launches))  # as the launches came back from JSON: lists for tuples
    for entry in known if isinstance(known, list) else []:
        if isinstance(entry, dict) and entry.get("launches") == wanted and isinstance(entry.get("rows"), list):
            return entry["rows"]
    return None


# -- the child process -----------------------------------------------------------------------------
class _Target:
    """Triton's driver, standing for a GPU this machine lacks: it names the target; nothing is launched
    (a warmup compiles only)."""

    def __init__(self, capability: int) -> None:
        self.capability = capability

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", self.capability, 32)

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0


def _pointer(dtype_name: str, aligned: bool):
    import torch
    from triton.runtime.jit import MockTensor

    pointer = MockTensor(getattr(torch, dtype_name))
    pointer.data_ptr = (lambda: 0) if aligned else (lambda: 4)  # what Triton's specialization reads
    return pointer


def _value(spec: dict[str, Any]) -> Any:
    if "tensor" in spec:
        return _pointer(spec["tensor"], spec["aligned"])
    if "tl_dtype" in spec:
        import triton.language as tl

        return tl.dtype(spec["tl_dtype"])
    if "none" in spec:
        return None
    return next(iter(spec.values()))


def _kernels(module: Any) -> dict[str, Any]:
    """The module's JIT functions by their function's name, unwrapped from autotuners and heuristics."""
    from triton.runtime.jit import JITFunction

    found: dict[str, Any] = {}
    for value in vars(module).values():
        seen = 0
        while value is not None and not isinstance(value, JITFunction) and seen < 8:
            value, seen = getattr(value, "fn", None), seen + 1
        if isinstance(value, JITFunction):
            found.setdefault(value.fn.__name__, value)
    return found


def _usage(cubin: bytes, scratch: Path) -> dict[str, int]:
    """Registers and local memory (spills) of the binary's kernel, as cuobjdump reads them."""
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    path = scratch / "kernel.cubin"
    path.write_bytes(cubin)
    out = subprocess.run([str(tool), "-res-usage", str(path)], capture_output=True, text=True, timeout=60).stdout
    match = _USAGE.search(out)
    if match is None:
        raise RuntimeError("cuobjdump reported no resource usage")
    return {"n_regs": int(match.group(2)), "n_spills": int(match.group(5)) // 4}  # local bytes, 4 per register


def _compile_one(kernel: Any, spec: dict[str, Any], scratch: Path, capability: int) -> dict[str, Any]:
    args = [_value(a) for a in spec["args"]]
    kwargs = {k: _value(v) for k, v in spec["kwargs"].items()}
    compiled = kernel.warmup(*args, grid=(1,), **kwargs)
    metadata = compiled.metadata
    row = {"num_warps": int(metadata.num_warps), "num_stages": int(metadata.num_stages),
           "shared_bytes": int(metadata.shared), **_usage(compiled.asm["cubin"], scratch)}
    return dict(row, derived_for=f"sm_{capability}")


def _child(request: dict[str, Any]) -> list[dict[str, Any]]:
    import importlib.util
    import tempfile

    from triton.runtime import driver

    from kfoundry.sandbox.environment import extend_sys_path

    extend_sys_path()  # the worker's import path: the problem's folder first, the parent's site folders
    major, _, minor = str(request["capability"]).partition(".")
    capability = int(major) * 10 + int(minor or 0)
    path = Path(request["module"])
    spec = importlib.util.spec_from_file_location(f"kfoundry_target_compile_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernels = _kernels(module)
    driver.set_active(_Target(capability))
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for name, launch in request["launches"].items():
            row: dict[str, Any] = {"name": name}
            try:
                if name not in kernels:
                    raise LookupError("no kernel of that name at the module's top level")
                row.update(_compile_one(kernels[name], launch, Path(scratch), capability))
            except Exception as exc:  # noqa: BLE001 -- the row says what failed, the others still compile
                row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            rows.append(row)
    return rows


if __name__ == "__main__":
    answer = _child(json.loads(sys.stdin.read()))
    sys.stdout.write("\n" + json.dumps(answer) + "\n")
