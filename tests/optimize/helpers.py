"""What the optimize tests share: the small affine problem, a seed kernel, the stand-in LLM."""

import shlex
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
AFFINE = FIXTURES / "problems" / "affine.py"
AFFINE_KERNEL = FIXTURES / "candidates" / "affine_ok.py"
WRITER = FIXTURES / "llm" / "kernel_writer.py"


def writer_spec(log: Path, first_broken: bool = False) -> str:
    words = [sys.executable, str(WRITER), str(log)] + (["broken"] if first_broken else [])
    return "cmd:" + " ".join(shlex.quote(w) for w in words)


def eval_options(**extra):
    from kfoundry.evaluate import EvalOptions

    return EvalOptions(device="cpu", trials=1, timeout_s=120, **extra)


def prompts(log: Path) -> list[str]:
    return [p for p in log.read_text().split("\n\x00\n") if p.strip()] if log.exists() else []
