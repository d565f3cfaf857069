"""The composer's candidates, byte for byte, on every problem the project holds (the suite, the
throughput problems, the examples and the fixtures), as the first population's 2 x 4 variants.

The golden files (tests/golden/composer/) were written from the code before a refactor; a change that
means to alter what the composer writes reruns this with KFOUNDRY_UPDATE_GOLDEN=1 and commits the
golden files with it, so that the difference is reviewed. tests/guard/test_golden.py judges the same
sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kfoundry.experts.composer import compose
from tests.helpers import GOLDEN, assert_golden

ROOT = Path(__file__).resolve().parents[3]
PROBLEM_GLOBS = ("benchmarks/suite/*.py", "benchmarks/throughput/*.py", "examples/*/problem.py",
                 "tests/fixtures/composer/*.py", "tests/fixtures/problems/*.py")
VARIANTS = 8  # what optimize composes for its default first population (2 x compose_variants)
SEPARATOR = "# ===== candidate "


def problem_files() -> list[Path]:
    return [path for pattern in PROBLEM_GLOBS for path in sorted(ROOT.glob(pattern))]


def golden_name(path: Path) -> str:
    """`benchmarks/suite/10_x.py` -> `benchmarks-suite-10_x.txt`; an example is named by its folder."""
    return "-".join(path.relative_to(ROOT).with_suffix("").parts) + ".txt"


def composed_text(path: Path) -> str:
    result = compose(path, max_variants=VARIANTS)
    lines = [f"# problem: {path.relative_to(ROOT)}", f"# message: {result.message}",
             f"# unsupported: {json.dumps(sorted(result.unsupported))}"]
    for index, candidate in enumerate(result.candidates):
        lines.append(f"{SEPARATOR}{index}: {candidate.name} =====")
        lines.append(f"# config: {json.dumps(candidate.config, sort_keys=True)}")
        lines.append(candidate.source.rstrip("\n"))
    return "\n".join(lines) + "\n"


def golden_sources(text: str) -> list[tuple[str, str]]:
    """(candidate name, source) of each candidate in a golden file."""
    found = []
    for block in text.split("\n" + SEPARATOR)[1:]:
        header, _config, source = block.split("\n", 2)
        found.append((header.split(": ", 1)[1].removesuffix(" ====="), source))
    return found


@pytest.mark.parametrize("path", problem_files(), ids=golden_name)
def test_the_composer_writes_what_it_wrote(path: Path) -> None:
    assert_golden(GOLDEN / "composer" / golden_name(path), composed_text(path))


def test_every_problem_has_its_golden_file_and_no_file_is_left_over() -> None:
    names = {golden_name(path) for path in problem_files()}
    assert len(names) == len(problem_files()) and len(names) >= 60
    assert {p.name for p in (GOLDEN / "composer").glob("*.txt")} == names
