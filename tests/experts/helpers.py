"""Shared by the experts' tests: prompt contexts, and running a parsed candidate in-process (Triton's
CPU interpreter, set up by tests/conftest.py) against the reference."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from kfoundry.diagnose.render import render_markdown
from kfoundry.experts import ParentInfo, PromptContext
from kfoundry.types import DeviceFacts, Diagnosis, DiagnosticFinding, SourceLocation

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REPLIES = FIXTURES / "llm" / "replies"
AFFINE = FIXTURES / "problems" / "affine.py"
MISSING_TAIL = FIXTURES / "candidates" / "missing_tail.py"
AFFINE_OK = FIXTURES / "candidates" / "affine_ok.py"

H200 = DeviceFacts(kind="cuda", name="NVIDIA H200", uuid="GPU-1234", sm_count=132, l2_bytes=60 * 2**20,
                   shared_memory_per_block_bytes=232448, shared_memory_per_sm_bytes=233472,
                   memory_bytes=150 * 2**30, peak_bandwidth_gbs=4321.5,
                   peak_tflops={"fp32": 51.7, "tf32": 378.2, "fp16": 702.4}, source="measured")


def tail_diagnosis() -> Diagnosis:
    return Diagnosis(
        status="wrong_output", summary="wrong_output: errors only in the last 232 elements", focus="repair",
        findings=[DiagnosticFinding(
            category="error-pattern", severity="error",
            title="errors only in the last 232 elements (flat index 768 on): the grid misses the tail",
            evidence=["max abs error 2.431", "23.20% of elements off"],
            location=SourceLocation(line=27, text="_affine_kernel[(n // BLOCK,)](x, y, n, ...)", function="forward"),
            direction="cover the whole output: grid = (triton.cdiv(n, BLOCK),)")])


def failing_parent() -> ParentInfo:
    return ParentInfo(source=MISSING_TAIL.read_text(), path=str(MISSING_TAIL), status="wrong_output",
                      message="output 0 differs from the reference: max abs error 2.431",
                      max_abs_error=2.431, diagnosis_markdown=render_markdown(tail_diagnosis()))


def working_parent() -> ParentInfo:
    return ParentInfo(source=AFFINE_OK.read_text(), path=str(AFFINE_OK), status="ok", message="correct",
                      runtime_ms=0.01234, speedup_eager=1.87, speedup_compile=0.93,
                      diagnosis_markdown="### Diagnosis: ok, launch-bound (next focus: launch)\nok, launch-bound: "
                                         "one kernel of 6.1 us per forward")


def context(**changes) -> PromptContext:
    values = {"problem_source": AFFINE.read_text(), "problem_name": "affine", "parents": [failing_parent()],
              "device": H200, "experience": [
                  {"title": "Floor-divided grids drop the tail", "text": "Always size grids with triton.cdiv.",
                   "source": "run 7 / row_sum"},
                  {"title": "Elementwise kernels", "text": "One flat masked kernel, BLOCK 1024.",
                   "code": "offs = pid * BLOCK + tl.arange(0, BLOCK)"}],
              "feedback": ["your last reply had no code block"]}
    values.update(changes)
    return PromptContext(**values)


def load_module(source: str, folder: Path, name: str):
    """Import `source` as a module from a real file (triton.jit reads the kernels' source text)."""
    path = folder / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


def matches_affine(source: str, folder: Path, name: str) -> bool:
    import torch

    problem = load_module(AFFINE.read_text(), folder, f"{name}_problem")
    candidate = load_module(source, folder, name)
    model, new = problem.Model(*problem.get_init_inputs()), candidate.ModelNew(*problem.get_init_inputs())
    torch.manual_seed(0)
    (x,) = problem.get_inputs()
    with torch.no_grad():
        return torch.allclose(new(x), model(x), atol=1e-5, rtol=1e-5)
