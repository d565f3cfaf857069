"""What a tunable is: its kinds, the values each kind may take, the rule that gives a constant its choices,
where it is spelled in the source (spans), and rewriting those spellings in place."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

KINDS = ("block", "warps", "stages", "group", "split", "cuda_threads", "cuda_const")


def _powers(lo: int, hi: int) -> tuple[int, ...]:
    return tuple(1 << i for i in range(hi.bit_length()) if lo <= 1 << i <= hi)


BLOCK_1D = _powers(16, 4096)
BLOCK_2D = _powers(16, 256)
WARPS = (1, 2, 4, 8, 16)
STAGES = (1, 2, 3, 4, 5, 6)
GROUPS = (1, 2, 4, 8, 16, 32)
SPLITS = (1, 2, 4, 8, 16)
CUDA_THREADS = _powers(32, 1024)
CUDA_TILE = _powers(2, 256)
CUDA_PER_THREAD = _powers(1, 16)
CUDA_WARPS = _powers(1, 32)


@dataclass(frozen=True)
class Span:
    start: int  # byte offsets into the UTF-8 source (the AST counts columns in bytes)
    end: int
    offset: int = 0  # the literal here spells value + offset: the 255 of `(n + 255) / 256` has -1


@dataclass
class Tunable:
    """One tunable constant of a candidate."""

    name: str  # unique within the source: the spelled name, qualified by its site when it repeats
    value: int
    kind: str  # one of KINDS
    choices: list[int]  # the valid values, the current one included
    where: str  # e.g. "line 42: launch of _matmul_kernel"
    spans: list[Span] = field(default_factory=list, repr=False)  # the first is the constant itself
    base: str = field(default="", repr=False)  # the name as the source spells it
    site: str = field(default="", repr=False)  # the kernel, scope, config or CUDA string it belongs to
    line: int = field(default=0, repr=False)


@dataclass(frozen=True)
class Rule:
    kind: str
    valid: tuple[int, ...]
    role: str = ""  # M, N or K for a 2-D tile dim of tl.dot, else warps / stages
    pow2: bool = True

    def choices(self, value: int) -> list[int] | None:
        """The choices around `value`, or None when `value` itself is not a sensible setting of this kind."""
        if value < 1 or (self.pow2 and value & (value - 1)):
            return None
        if self.kind == "cuda_threads" and (value % 32 or value > 1024):
            return None
        return sorted(set(self.valid) | {value})


def apply_values(source: str, tunables: list[Tunable], values: dict[str, int]) -> str | None:
    """`source` with the named tunables set to new values, only their digits rewritten; None if rewrites overlap."""
    edits = sorted((s.start, s.end, str(values[t.name] + s.offset).encode())
                   for t in tunables if t.name in values for s in t.spans)
    if any(later[0] < earlier[1] for earlier, later in itertools.pairwise(edits)):
        return None
    data = bytearray(source.encode("utf-8"))
    for start, end, text in reversed(edits):
        data[start:end] = text
    return data.decode("utf-8")
