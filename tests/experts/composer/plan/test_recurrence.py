"""Loop fission into a recurrence: an Elman cell written as a Python loop becomes one GEMM projecting every step's
input, the recurrent template's step kernel, and one GEMM for what the steps compute from the state alone; any
other loop is left to loop rolling."""

from pathlib import Path

from kfoundry.experts.composer.compose import _load, capture, copy_unwritten_outputs
from kfoundry.experts.composer.plan.recurrence import fission, with_recurrences
from kfoundry.problem import on_host
from tests.experts.composer.helpers import RNN_LOOP, RNN_SIZES, compose_ok, fixture, submit, verdict
from tests.experts.composer.plan.test_rolling import forward_of, quick


def _graph(path: Path, set_values: dict | None = None):
    sample = _load(path, set_values, False)
    with on_host(sample.device):
        return copy_unwritten_outputs(capture(sample).graph)


def _recurrent(graph):
    return [op for op in graph.ops if op.name == "recurrent"]


def test_an_elman_loop_is_a_projection_a_recurrence_and_a_readout_at_any_step_count():
    few = compose_ok(RNN_LOOP, set_values=dict(RNN_SIZES, steps=5), max_variants=4, tolerance=1e-4)
    many = compose_ok(RNN_LOOP, set_values=dict(RNN_SIZES, steps=64), max_variants=4, tolerance=1e-4)
    assert "of 3 kernel(s)" in few.message and "of 3 kernel(s)" in many.message
    assert "matmul with add fused; RNN layer (5 steps); matmul with add fused" in few.message
    for a, b in zip(few.candidates, many.candidates):
        assert forward_of(a.source) == forward_of(b.source)
    body = forward_of(quick(few).source)
    assert body.count("_gemm_0_kernel[") == 2 and body.count("_recurrent_0_kernel[") == 1
    assert "for t in range(" in body and "FIRST=t == 0" in body  # a zero initial state: the first product skipped
    # composed at 5 steps, judged at 2 steps and another batch
    verdict(submit(RNN_LOOP, quick(few).source, set_values=dict(RNN_SIZES, steps=2, batch_size=3), tolerance=1e-4))


def test_the_graph_holds_one_recurrent_op_whatever_the_step_count():
    small, large = (with_recurrences(_graph(RNN_LOOP, dict(RNN_SIZES, steps=s))) for s in (3, 40))
    assert [o.name for o in small.ops if o.out.is_tensor] == [o.name for o in large.ops if o.out.is_tensor]
    [op] = _recurrent(small)
    assert op.attrs["kind"] == "RNN_TANH" and op.attrs["time"] == 0 and not op.attrs.get("reverse")
    assert op.args[3] is None  # the zeros the loop starts from are the template's skipped first product
    assert op.args[0].shape == (3, RNN_SIZES["batch_size"], RNN_SIZES["hidden_size"])  # every step's projection
    assert not any(o.name == "cat" for o in small.ops)  # the cat([x_t, h]) is the weight split in two


def test_a_backward_walk_with_two_linears_and_a_given_state():
    path = fixture("backward_rnn_steps")
    [op] = _recurrent(with_recurrences(_graph(path)))
    assert op.attrs["kind"] == "RNN_RELU" and op.attrs["time"] == 1 and op.attrs["reverse"]
    assert op.args[3] is not None and op.args[3].kind == "input"  # h, forward's argument
    result = compose_ok(path, max_variants=4, tolerance=1e-4)
    assert "RNN layer" in result.message and "a loop" not in result.message
    verdict(submit(path, quick(result).source, set_values={"steps": 3, "batch_size": 3}, tolerance=1e-4))


def test_the_state_concatenated_first_and_the_last_state_returned():
    path = fixture("elman_state_first")
    result = compose_ok(path, max_variants=4, tolerance=1e-4)
    assert "RNN layer (4 steps); matmul with add, sigmoid fused" in result.message
    verdict(submit(path, quick(result).source, set_values={"steps": 6, "input_size": 7}, tolerance=1e-4))


def test_loops_of_other_forms_are_left_to_rolling():
    for name in ("normed_rnn_loop", "backward_clamped_steps", "residual_blocks", "pointwise_steps"):
        assert fission(_graph(fixture(name))) is None, name
