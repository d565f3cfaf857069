"""CUDA graphs under the dynamic guard, with a stand-in graph class (there is no GPU here): a replay counts the
launches its capture recorded; in ghost mode it runs nothing and poisons what the capture allocated; launches made
while capturing are the graph's, never turned off."""

import os

import torch

from kfoundry.guard.dynamic import LaunchTracker

os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def _double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)


class StandInGraph:
    """Runs again on replay what its capture ran, as a CUDA graph replays its kernels: without passing through
    Triton's launch path (here a PyTorch op does the kernel's work)."""

    def capture_begin(self, *args, **kwargs):
        self.work = None

    def capture_end(self):
        pass

    def replay(self):
        self.work()


def forward(graph: StandInGraph, x: torch.Tensor) -> torch.Tensor:
    """A graph variant's forward: captured on the first call, replayed after."""
    if getattr(graph, "out", None) is None:
        graph.capture_begin()
        out = torch.empty_like(x)
        _double_kernel[(1,)](x, out, x.numel(), BLOCK=16)
        graph.work, graph.out = (lambda: torch.mul(x, 2, out=out)), out
        graph.capture_end()
    graph.replay()
    return graph.out


def test_replays_count_the_captured_launches_and_ghost_mode_poisons_the_graphs_memory():
    tracker = LaunchTracker().install()
    undo = tracker.graphs.install(StandInGraph)
    try:
        graph, x = StandInGraph(), torch.arange(8, dtype=torch.float32)
        out = forward(graph, x)  # the capture's launch is the graph's; the replay counts it once
        assert torch.equal(out, x * 2)
        assert tracker.launches == 1 and tracker.kernel_names == {"_double_kernel"}
        forward(graph, x)
        assert tracker.launches == 2 and tracker.graphs.replays == 2
        tracker.ghost = True
        out = forward(graph, x)  # kernels off: the graph runs nothing, its output is poison
        assert torch.isnan(out).all() and tracker.launches == 2
        tracker.ghost = False
        assert torch.equal(forward(graph, x), x * 2)  # and the next replay rewrites it
    finally:
        undo()
        tracker.uninstall()


def test_a_capture_in_ghost_mode_records_real_launches():
    tracker = LaunchTracker().install()
    undo = tracker.graphs.install(StandInGraph)
    try:
        tracker.ghost = True
        graph, x = StandInGraph(), torch.ones(4)
        forward(graph, x)  # captured (for real) and replayed (turned off)
        tracker.ghost = False
        assert torch.equal(forward(graph, x), x * 2)
    finally:
        undo()
        tracker.uninstall()


def test_the_watch_undoes_itself():
    before = dict(vars(StandInGraph))
    tracker = LaunchTracker().install()
    undo = tracker.graphs.install(StandInGraph)
    undo()
    tracker.uninstall()
    assert dict(vars(StandInGraph)) == before
