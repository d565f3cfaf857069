"""Discovery as a whole: everything tunable in a candidate (the Python and the CUDA halves), with unique
names, and the facts its limits are checked on."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from kfoundry import source_ast
from kfoundry.experts.tunables.cuda import CudaFacts, cuda_facts, cuda_strings, cuda_tunables
from kfoundry.experts.tunables.python import PythonModule, TileGroup, python_tunables, tile_groups
from kfoundry.experts.tunables.tunable import Span, Tunable


@dataclass
class Discovery:
    tunables: list[Tunable]
    tile_groups: list[TileGroup]
    cuda: list[CudaFacts]


def discover(source: str) -> Discovery | None:
    """Everything tunable in `source`, and what the limits are checked on; None when it does not parse."""
    if not isinstance(source, str):
        return None
    try:
        return _discover(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # does not parse, or nests beyond the stack
        return None


def _discover(source: str) -> Discovery:
    py = PythonModule(source, source_ast.parse(source))
    cuda = cuda_strings(py)
    found = python_tunables(py)
    found += [t for text in cuda for t in cuda_tunables(text)]
    return Discovery(_finish([t for t in found if t is not None]), tile_groups(py), [cuda_facts(c) for c in cuda])


def find_tunables(source: str) -> list[Tunable]:
    """The tunable constants of a candidate in source order; [] when there are none or it does not parse."""
    found = discover(source)
    return found.tunables if found else []


def _finish(found: list[Tunable]) -> list[Tunable]:
    """Drop tunables whose rewrites overlap another's (ambiguous ties), order by position, make names unique."""
    for tunable in found:
        tunable.spans = [tunable.spans[0], *sorted(set(tunable.spans[1:]) - {tunable.spans[0]}, key=_span_key)]
    claims = Counter((s.start, s.end) for t in found for s in t.spans)
    kept = sorted((t for t in found if all(claims[(s.start, s.end)] == 1 for s in t.spans)),
                  key=lambda t: t.spans[0].start)
    counts = Counter(t.base for t in kept)
    for tunable in kept:
        tunable.name = tunable.base if counts[tunable.base] == 1 else f"{tunable.base}@{tunable.site}"
    counts = Counter(t.name for t in kept)
    for tunable in kept:
        if counts[tunable.name] > 1:
            tunable.name = f"{tunable.base}@line{tunable.line}"
    seen: Counter[str] = Counter()
    for tunable in kept:
        seen[tunable.name] += 1
        if seen[tunable.name] > 1:  # two on one line
            tunable.name = f"{tunable.name}#{seen[tunable.name]}"
    return kept


def _span_key(span: Span) -> tuple[int, int]:
    return span.start, span.end
