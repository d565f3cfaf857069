"""Small suites for the bench tests."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

TINY = """import torch
import torch.nn as nn

n = 8


class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
"""
NOT_A_PROBLEM = "import torch\n\nvalue = 1  # no Model, get_inputs or get_init_inputs\n"


def write_suite(directory: Path, names: list[str], text: str = TINY) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_text(text)
    return directory


def copy_examples(directory: Path, names: dict[str, str]) -> Path:
    """{"1_pointwise_chain": "pointwise_chain", ...}: examples' problems under numbered names."""
    directory.mkdir(parents=True, exist_ok=True)
    for target, example in names.items():
        (directory / f"{target}.py").write_text((EXAMPLES / example / "problem.py").read_text())
    return directory
