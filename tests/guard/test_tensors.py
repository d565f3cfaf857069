"""The guard's tensor helpers: poison by dtype, storage identity of views, tensors found inside values."""

import torch

from kfoundry.guard.tensors import fill_poison, storage_of, tensors_in


def test_poison_is_what_no_kernel_writes():
    floats, flags, ints = torch.zeros(3), torch.zeros(2, dtype=torch.bool), torch.zeros(2, dtype=torch.int32)
    for tensor in (floats, flags, ints):
        fill_poison(tensor)
    assert torch.isnan(floats).all() and flags.all() and (ints == torch.iinfo(torch.int32).max // 2).all()


def test_views_share_a_storage_and_tensors_are_found_inside_values():
    x = torch.arange(6.0)
    assert storage_of(x.view(2, 3)[1]) == storage_of(x) != storage_of(x.clone())
    found = tensors_in({"a": [x, (x.view(3, 2), 1)], "b": None})
    assert len(found) == 2 and found[0] is x
