"""Small helpers shared by the tests."""

from pathlib import Path

AFFINE_SEED = 1234  # the --seed of the shared affine evaluator (conftest.affine_evaluator)


def marker_line(path: Path, marker: str) -> int:
    """The 1-based line of `path` holding `marker` (fixtures mark their faulty line with a comment)."""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if marker in line:
            return number
    raise AssertionError(f"{marker!r} not in {path}")


def alive(pid: int) -> bool:
    """Running: a killed process whose parent is gone stays a zombie until init reaps it (in a container
    init may never do so), and a zombie counts as dead."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
