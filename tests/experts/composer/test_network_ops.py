"""Ops whole networks use, composed and judged correct by the real evaluator on the CPU: splits (MinGPT's
attention), vector norms, nn.MultiheadAttention, nn.TransformerEncoder(Layer) in training and eval mode,
einops-style rearranges, and bidirectional LSTM / GRU layers; dropout that is random is refused."""

import pytest

from kfoundry.experts.composer.compose import compose
from tests.experts.composer.helpers import compose_ok, first_exact, fixture, submit, verdict

# case -> (fixture, sizes and settings, eval mode, the trace it must be read from)
CASES = {
    "gpt_attention_split": ("network_gpt_attention", {}, False, "aten"),
    "splits_fx": ("network_splits", {}, False, "fx"),
    "splits_aten": ("network_splits", {"through_buffer": True}, False, "aten"),
    "norms": ("network_norms", {}, False, "fx"),
    "mha_batch_first": ("network_mha", {}, False, "fx"),
    "mha_sequence_first_eval": ("network_mha", {"batch_first": False}, True, "fx"),
    "encoder_post_norm_relu": ("network_encoder", {}, False, "fx"),
    "encoder_pre_norm_gelu_eval": ("network_encoder", {"norm_first": True, "activation": "gelu"}, True, "fx"),
    "encoder_causal_aten": ("network_encoder", {"causal": True, "activation": "gelu"}, False, "aten"),
    "rearrange": ("network_rearrange", {}, False, "fx"),
    "bidirectional_lstm": ("network_birnn", {}, False, "fx"),
    "bidirectional_gru_sequence_first": ("network_birnn", {"kind": "GRU", "batch_first": False}, False, "fx"),
}


@pytest.fixture(scope="module")
def judged():
    """Each case composed in the main process, judged two at a time in the background. Without the guard's extra
    runs (helpers.py): the claim is that reading these ops gives correct kernels, and their kernels are the GEMM,
    row and pointwise templates, whose own tests run the guard in full; a network's candidate launches a dozen
    kernels or more, and the extra runs would be more than half of this file's interpreted time."""
    found = {}
    for case, (name, values, eval_mode, tracer) in CASES.items():
        result = compose_ok(fixture(name), set_values=values, eval_mode=eval_mode, max_variants=1, tolerance=1e-4)
        candidate = first_exact(result)
        found[case] = (result, submit(fixture(name), candidate.source, set_values=values, eval_mode=eval_mode,
                                      label=case, tolerance=1e-4, guard_runs=False))
    return found


@pytest.mark.parametrize("case", sorted(CASES))
def test_network_op_composes_correctly(judged, case):
    result, future = judged[case]
    tracer = CASES[case][3]
    if tracer == "aten":
        assert "read from the dispatch-level (ATen) trace" in result.notes, result.notes
    elif tracer == "fx":
        assert not any("dispatch-level" in note for note in result.notes), result.notes
    verdict(future)


def test_random_dropout_is_refused_in_training_mode_only():
    refused = compose(fixture("network_mha"), set_values={"dropout": 0.1}, max_variants=1)
    assert not refused.candidates
    assert "dropout (training mode)" in refused.unsupported, refused.message
    compose_ok(fixture("network_mha"), set_values={"dropout": 0.1}, eval_mode=True, max_variants=1)
