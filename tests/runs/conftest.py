from pathlib import Path

import pytest

from kfoundry.runs import RunStore

PROBLEM = "import torch\n\n\nclass Model(torch.nn.Module):\n    pass\n"


@pytest.fixture
def problem_file(tmp_path: Path) -> Path:
    path = tmp_path / "problem.py"
    path.write_text(PROBLEM)
    return path


@pytest.fixture
def store(tmp_path: Path, problem_file: Path):
    with RunStore.create(tmp_path / "run", problem_file, {"islands": 2}, seed=7) as opened:
        yield opened


def evaluation(status: str = "ok", speedup_eager: float | None = None,
               speedup_compile: float | None = None, runtime_ms: float | None = None) -> dict:
    """A minimal Evaluation.to_dict()-shaped dict."""
    return {
        "status": status, "message": f"{status} message", "phase": "timing",
        "correctness": {"trials": 3, "trials_passed": 3 if status == "ok" else 1, "max_abs_error": 1e-6},
        "timing": {"runtime_ms": runtime_ms, "eager_ms": 2.0, "compile_ms": 1.5, "statistic": "median",
                   "speedup_eager": speedup_eager, "speedup_compile": speedup_compile, "trials": 100,
                   "torch_version": "2.99"},
        "diagnosis": {"status": status, "summary": "s", "findings": [], "focus": "none", "bound": None},
    }
