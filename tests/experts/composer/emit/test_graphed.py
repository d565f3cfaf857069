"""The CUDA-graph variant: a forward of many launches (a rolled loop) also comes as a variant that replays its
kernels from a graph on a GPU, and runs them as they are elsewhere."""

from kfoundry.experts.composer.emit.graphed import can_graph
from tests.experts.composer.helpers import RNN_LOOP, RNN_SIZES, compose_ok, fixture, submit, verdict

SMALL = dict(RNN_SIZES, steps=3)


def test_a_rolled_loop_gets_a_graph_variant_second():
    path = RNN_LOOP
    result = compose_ok(path, set_values=SMALL, max_variants=4, tolerance=1e-4)
    names = [c.name for c in result.candidates]
    assert names[1] == names[0] + "_graph" and sum(n.endswith("_graph") for n in names) == 1
    plain, graphed = result.candidates[0], result.candidates[1]
    assert graphed.config == plain.config
    assert "return _cuda_graphed(self, self._kernels, x)" in graphed.source and "def _kernels(self, x):" in graphed.source
    assert "with torch.cuda.graph(graph):" in graphed.source and "_cuda_graphed" not in plain.source
    # on the CPU the helper runs the kernels as they are
    verdict(submit(path, graphed.source, set_values=SMALL, tolerance=1e-4))


def test_one_variant_asked_for_is_never_the_graph_one():
    result = compose_ok(RNN_LOOP, set_values=SMALL, max_variants=1, tolerance=1e-4)
    assert [c.name.endswith("_graph") for c in result.candidates] == [False]


def test_a_forward_of_few_launches_has_no_graph_variant():
    result = compose_ok(fixture("linear_gelu_scale"), max_variants=4)
    assert not any(c.name.endswith("_graph") for c in result.candidates)


def test_only_plain_positional_forwards_are_graphed():
    assert can_graph("self, x, h", ["x", "h"])
    assert not can_graph("self, x, h=None", ["x", "h"])
    assert not can_graph("self, *xs", [])
