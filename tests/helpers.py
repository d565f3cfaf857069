"""Small helpers shared by the tests."""

from pathlib import Path

AFFINE_SEED = 1234  # the --seed of the shared affine evaluator (conftest.affine_evaluator)


def marker_line(path: Path, marker: str) -> int:
    """The 1-based line of `path` holding `marker` (fixtures mark their faulty line with a comment)."""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if marker in line:
            return number
    raise AssertionError(f"{marker!r} not in {path}")
