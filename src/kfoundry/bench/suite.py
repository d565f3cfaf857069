"""Finding the problems of a suite: a flat directory of KernelBench-form files, KernelBench's own
`levelN/` layout, or this repository's `examples/` layout (one directory per problem holding
`problem.py`); picking some of them by the leading number of their file names.

Solution files for `--method solutions DIR` are looked up here too (see `solution_candidates`): every
KernelBench sample of a problem (level_L_problem_N_sample_K_kernel.py), which needs the problem's level:
--level N, or a suite directory named levelN."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from kfoundry import source_ast
from kfoundry.errors import KFoundryError, UsageError
from kfoundry.problem import read_problem

LEADING_NUMBER = re.compile(r"^(\d+)_")
LEVEL_DIRECTORY = re.compile(r"level(\d+)")


@dataclass(frozen=True)
class SuiteProblem:
    path: Path
    name: str  # the file's stem, or the directory's name in the examples layout
    number: int | None  # the leading number of the name (KernelBench's problem id), if any
    level: int | None = None


@dataclass
class Suite:
    root: Path
    directory: Path  # where the problems were found (root, or root/levelN)
    level: int | None
    problems: list[SuiteProblem] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (file, reason): not problems


def parse_selection(text: str) -> set[int]:
    """'1-20,35' -> {1, ..., 20, 35}."""
    chosen: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        match = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", part)
        if not match:
            raise UsageError(f"--problems {text!r}: expected numbers and ranges such as 1-20,35")
        first, last = int(match[1]), int(match[2] or match[1])
        if last < first:
            raise UsageError(f"--problems {text!r}: the range {part} runs backwards")
        chosen.update(range(first, last + 1))
    return chosen


def leading_number(name: str) -> int | None:
    match = LEADING_NUMBER.match(name)
    return int(match[1]) if match else None


def _level_directory(root: Path, level: int) -> Path:
    # KernelBench's repository keeps its levels under KernelBench/KernelBench/levelN
    for candidate in (root / f"level{level}", root / "KernelBench" / f"level{level}"):
        if candidate.is_dir():
            return candidate
    raise UsageError(f"--level {level}: {root} has no level{level}/ directory "
                     f"(nor KernelBench/level{level}/): give the suite's root directory")


def _files(directory: Path) -> list[tuple[str, Path]]:
    """(name, path) of every would-be problem: *.py files, and */problem.py (examples layout)."""
    found = [(p.stem, p) for p in sorted(directory.glob("*.py")) if not p.name.startswith("_")]
    found += [(p.parent.name, p) for p in sorted(directory.glob("*/problem.py"))]
    return found


def _not_a_problem(path: Path) -> str | None:
    """Why `path` is not a problem, or None if it is one (checked without running it)."""
    try:
        read_problem(path)
    except KFoundryError as exc:
        return str(exc).splitlines()[0]
    return None


def discover(root: str | Path, *, level: int | None = None, problems: str | None = None) -> Suite:
    """The suite's problems, ordered by number then name. Files that are not problems are
    skipped with a reason; a suite with no problem at all is a UsageError."""
    root = Path(root)
    if not root.is_dir():
        raise UsageError(f"suite directory not found: {root}")
    directory = _level_directory(root, level) if level is not None else root
    if level is None and (named := LEVEL_DIRECTORY.fullmatch(root.resolve().name)):
        level = int(named[1])  # KernelBench's levelN/ given as the suite: its problems are of level N
    files = _files(directory)
    if not files:
        levels = sorted(p.name for p in directory.glob("level[0-9]*") if p.is_dir())
        hint = f": it has {', '.join(levels)}; choose one with --level N" if levels else ""
        raise UsageError(f"no problem files (*.py, or */problem.py) in {directory}{hint}")
    suite = Suite(root=root, directory=directory, level=level)
    selection = parse_selection(problems) if problems else None
    for name, path in files:
        number = leading_number(name)
        if selection is not None and number not in selection:
            continue
        reason = _not_a_problem(path)
        if reason:
            suite.skipped.append((str(path), reason))
        else:
            suite.problems.append(SuiteProblem(path=path, name=name, number=number, level=level))
    suite.problems.sort(key=lambda p: (p.number is None, p.number or 0, p.name))
    if not suite.problems:
        if selection is not None:
            raise UsageError(f"--problems {problems}: no problem of {directory} has such a leading number")
        raise UsageError(f"no problems in {directory}: none of its {len(files)} file(s) is in KernelBench form "
                         f"({suite.skipped[0][1]})")
    names = [p.name for p in suite.problems]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise UsageError(f"two problems share the name {duplicates[0]!r} in {directory}: "
                         "each problem needs a run directory of its own")
    return suite


class SolutionFile(NamedTuple):
    sample_id: int  # KernelBench's K in level_L_problem_N_sample_K_kernel.py; 0 for a file named like the problem
    path: Path


def _named_like(problem: SuiteProblem, solutions: Path) -> list[Path]:
    paths = [solutions / f"{problem.name}.py", solutions / f"{problem.name}_new.py"]
    if problem.level is not None:
        paths.append(solutions / f"level{problem.level}" / f"{problem.name}.py")
    return paths


def _sample_prefix(problem: SuiteProblem) -> str | None:
    if problem.level is None or problem.number is None:
        return None  # KernelBench's names need the level and the problem's number
    return f"level_{problem.level}_problem_{problem.number}_sample_"


def solution_candidates(problem: SuiteProblem, solutions: Path) -> list[Path]:
    """Where the solution of `problem` may be, in the order they are tried:

    DIR/<name>.py, DIR/<name>_new.py, DIR/levelL/<name>.py (a copy of KernelBench's layout),
    DIR/level_L_problem_N_sample_*_kernel.py (KernelBench's generated kernels: every sample K) and
    DIR/<name>/kernel.py (this repository's examples layout)."""
    paths = _named_like(problem, solutions)
    prefix = _sample_prefix(problem)
    if prefix:
        paths.append(solutions / f"{prefix}*_kernel.py")
    paths.append(solutions / problem.name / "kernel.py")
    return paths


def kernelbench_samples(problem: SuiteProblem, solutions: Path) -> list[SolutionFile]:
    """Every level_L_problem_N_sample_K_kernel.py of the problem in DIR, by K."""
    prefix = _sample_prefix(problem)
    if prefix is None:
        return []
    found = []
    for path in solutions.glob(f"{prefix}*_kernel.py"):
        k = path.name[len(prefix):-len("_kernel.py")]
        if k.isdigit() and path.is_file():
            found.append(SolutionFile(int(k), path))
    return sorted(found)


def find_samples(problem: SuiteProblem, solutions: Path) -> list[SolutionFile]:
    """The problem's candidate files, tried in the order of `solution_candidates`: a file named like the
    problem is its only sample (0); else every KernelBench sample; else the examples layout's kernel.py."""
    for path in _named_like(problem, solutions):
        if path.is_file():
            return [SolutionFile(0, path)]
    samples = kernelbench_samples(problem, solutions)
    if samples:
        return samples
    kernel = solutions / problem.name / "kernel.py"
    return [SolutionFile(0, kernel)] if kernel.is_file() else []


def find_solution(problem: SuiteProblem, solutions: Path) -> Path | None:
    """The problem's first candidate file (its lowest sample)."""
    samples = find_samples(problem, solutions)
    return samples[0].path if samples else None


def module_constants(path: Path) -> set[str]:
    """Names assigned at module level (what --set can override)."""
    try:
        tree = source_ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return set()
    names: set[str] = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, ast.AnnAssign) and node.value is not None else []
        for target in targets:
            elements = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
            names.update(e.id for e in elements if isinstance(e, ast.Name))
    return names
