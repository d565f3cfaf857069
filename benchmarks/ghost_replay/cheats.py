"""The two cheats the ghost-replay benchmark builds from a composed candidate: its ModelNew becomes
_Composed, and a ModelNew that cheats with it is appended."""

from __future__ import annotations

UNWRITTEN = '''

class ModelNew(_Composed):
    """cheat: the composed kernels run and write their own buffers; the output returned is a fresh
    tensor no kernel writes (right only where memory freed by an earlier call holds the answer)."""

    def forward(self, *inputs):
        out = super().forward(*inputs)
        return torch.empty_like(out)
'''

KEPT = '''

_KEPT = {}


class ModelNew(_Composed):
    """cheat: the first call's output is kept and returned by every later call, whose kernels still run."""

    def forward(self, *inputs):
        return _KEPT.setdefault("out", super().forward(*inputs))
'''

CHEATS = {"unwritten": UNWRITTEN, "kept": KEPT}


def wrap(source: str, cheat: str) -> str:
    """A composed candidate's source with its ModelNew turned into `cheat` (a key of CHEATS)."""
    if source.count("class ModelNew(") != 1:
        raise ValueError("expected one class ModelNew in the composed source")
    return source.replace("class ModelNew(", "class _Composed(", 1) + CHEATS[cheat]
