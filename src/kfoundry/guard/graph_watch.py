"""CUDA graphs under the dynamic guard. A candidate may capture its forward's kernels in a CUDA graph once and
replay it on later calls (the composer's graph variants do): a replay launches those kernels without passing
through Triton's launch path, where `LaunchTracker` counts them and, in ghost mode, turns them off.

So the watch wraps `torch.cuda.CUDAGraph`:
- while a graph is captured, the Triton launches made are recorded as the graph's (they run only when it is
  replayed), with the tensors the capture allocates (the graph's own memory: its outputs and intermediates);
- a replay counts the graph's launches and kernel names as the call's;
- in ghost mode a replay runs nothing and poisons the graph's memory instead, as a Triton launch turned off
  leaves its outputs unwritten: the output must then not be right.
A graph captured through another door (torch._C._CUDAGraph) escapes the watch: its replays run in ghost mode, and
the ghost check judges such a forward cheating.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kfoundry.guard.tensors import fill_poison, storage_of, tensors_in


@dataclass
class GraphRecord:
    launches: int = 0
    names: set[str] = field(default_factory=set)
    memory: list[torch.Tensor] = field(default_factory=list)  # what the capture allocated
    replays: int = 0


class _Allocations(TorchDispatchMode):
    """The tensors ops return in new storage (not a view of, nor written into, one of their arguments)."""

    def __init__(self, into: list[torch.Tensor]) -> None:
        super().__init__()
        self.into = into

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        given = {storage_of(t) for t in tensors_in(list(args) + list((kwargs or {}).values()))}
        self.into.extend(t for t in tensors_in(out) if t.numel() and storage_of(t) not in given)
        return out


class GraphWatch:
    """Installed on a graph class (torch.cuda.CUDAGraph, or a stand-in with the same methods in tests)."""

    def __init__(self, tracker: Any) -> None:
        self.tracker = tracker
        self.records: dict[int, GraphRecord] = {}  # id(graph) -> what its capture recorded
        self.capturing: GraphRecord | None = None
        self._mode: _Allocations | None = None

    @property
    def replays(self) -> int:
        return sum(record.replays for record in self.records.values())

    def install(self, cls: type) -> Callable[[], None]:
        """Wraps cls's capture and replay; returns what undoes it."""
        originals = {name: vars(cls).get(name) for name in ("capture_begin", "capture_end", "replay")}
        begin, end, replay = (getattr(cls, name) for name in ("capture_begin", "capture_end", "replay"))
        watch = self

        def capture_begin(graph, *args, **kwargs):
            result = begin(graph, *args, **kwargs)
            watch._begin(graph)
            return result

        def capture_end(graph, *args, **kwargs):
            watch._end()
            return end(graph, *args, **kwargs)

        def replay_watched(graph, *args, **kwargs):
            record = watch.records.get(id(graph))
            if record is None:
                return replay(graph, *args, **kwargs)
            record.replays += 1
            if watch.tracker.ghost:
                for tensor in record.memory:
                    fill_poison(tensor)
                return None
            watch.tracker.launches += record.launches
            watch.tracker.kernel_names |= record.names
            return replay(graph, *args, **kwargs)

        cls.capture_begin, cls.capture_end, cls.replay = capture_begin, capture_end, replay_watched

        def undo() -> None:
            for name, original in originals.items():
                if original is None:
                    delattr(cls, name)
                else:
                    setattr(cls, name, original)

        return undo

    def _begin(self, graph: Any) -> None:
        record = self.records[id(graph)] = GraphRecord()
        self.capturing = record
        self._mode = _Allocations(record.memory)
        self._mode.__enter__()

    def _end(self) -> None:
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
        self._mode, self.capturing = None, None

    def launched(self, name: str | None) -> bool:
        """A Triton launch: recorded as the graph's while one is captured (True), else the call's (False)."""
        record = self.capturing
        if record is None:
            return False
        record.launches += 1
        if name:
            record.names.add(name)
        return True
