"""What moves out of a rolled loop: views and copies of what the loop never assigns or writes."""

from kfoundry.experts.composer.emit.hoist import hoist

BODY = [
    "        select = x.select(0, step)",
    "        # gemm kernel: matmul, add",
    "        transpose = w.transpose(0, 1)",
    "        transpose_hi, transpose_lo, transpose_inv = _split_fp16x3(transpose, -2)",
    "        cat_hi, cat_lo, cat_inv = _split_fp16x3(state, -1)",
    "        part = x.narrow(0, step, 1)",
    "        layer_weight = self.blocks[step].weight",
    "        layer_t = layer_weight.transpose(0, 1)",
    "        seen = collected.contiguous()",
    "        out = torch.empty((4, 4), device=x.device, dtype=x.dtype)",
    "        bias = self.fc.bias.reshape(-1, 1)",
    "        _k[(1,)](\n            out, transpose_hi, BLOCK=4)",
    "        state = out",
]


def test_views_and_copies_of_what_the_loop_never_changes_move_before_it():
    moved, kept = hoist(BODY, "step", {"collected"})
    assert moved == [BODY[2], BODY[3], BODY[10]]
    assert kept == [line for line in BODY if line not in moved]


def test_a_name_assigned_twice_in_the_loop_stays():
    body = ["        v = w.transpose(0, 1)", "        v = v.reshape(-1)"]
    assert hoist(body, "step", set()) == ([], body)
