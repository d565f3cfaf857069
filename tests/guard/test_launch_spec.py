"""kfoundry.guard.launch_spec: a Triton launch through the interpreter, as JSON a compile in another process can
stand in for: pointers by dtype and alignment, scalars and constants by value, and None where it cannot."""

import torch

from kfoundry.guard.launch_spec import launch_spec


def test_pointers_scalars_and_constants_are_described_and_the_launch_options_left_out():
    x = torch.zeros(64)
    spec = launch_spec((x, x[1:], 7, 0.5, True, None), {"BLOCK": 128, "num_warps": 4, "grid": (2,), "warmup": False})
    assert spec["args"] == [{"tensor": "float32", "aligned": True}, {"tensor": "float32", "aligned": False},
                            {"int": 7}, {"float": 0.5}, {"bool": True}, {"none": True}]
    assert spec["kwargs"] == {"BLOCK": {"int": 128}, "num_warps": {"int": 4}}


def test_triton_constants_and_dtypes_are_kept_and_anything_else_gives_none():
    import triton.language as tl

    spec = launch_spec((torch.zeros(2, dtype=torch.bfloat16),), {"ACC": tl.float32, "N": tl.constexpr(16)})
    assert spec["args"] == [{"tensor": "bfloat16", "aligned": True}]
    assert spec["kwargs"] == {"ACC": {"tl_dtype": "fp32"}, "N": {"int": 16}}
    assert launch_spec((object(),), {}) is None
    assert launch_spec((), {"table": [1, 2]}) is None
