"""What the reference side computes with, in processes that never import a candidate (the judge
and the baseline process): plain copies of outputs, cloned and float64 inputs, the guard's outlier
inputs, and the wording of the weak-problem warnings."""

from __future__ import annotations

import copy
from typing import Any

import torch

from kfoundry import problem as problems
from kfoundry.evaluate.reference.compare import flatten_outputs


def plain(value: Any) -> Any:
    """Outputs as plain CPU tensors (or plain values), in their nested structure."""
    if isinstance(value, torch.Tensor):
        moved = value.detach().to("cpu").as_subclass(torch.Tensor)
        # copying to the CPU already made a tensor of its own; only a CPU tensor needs the clone
        return moved if value.device.type != "cpu" else moved.clone()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def upcast(value: Any) -> Any:
    return problems.cast_floats(value, torch.float64)


def draw_inputs(module, seed: int, dtype, device: str) -> list:
    """One set's inputs, the same in the judge and the baseline process: on a GPU they are drawn there
    (drawing 0.5 GB on the CPU took over a second per set), so their values are the GPU generator's."""
    if device.startswith("cuda"):
        with torch.device(device):
            return problems.make_inputs(module, seed, dtype, device)
    return problems.make_inputs(module, seed, dtype, device)


def clone_inputs(inputs: list) -> list:
    return [x.clone() if isinstance(x, torch.Tensor) else copy.deepcopy(x) for x in inputs]


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


CHUNK = 1 << 25  # elements per pass: float64 temporaries of 256 MB, whatever the tensor's size


def _tensor_close(x: torch.Tensor, y: torch.Tensor, tol: float) -> bool:
    """allclose in float64 (NaN equal to NaN), a chunk at a time: outputs can be GBs."""
    if x.shape != y.shape:
        return False
    fx, fy = x.reshape(-1), y.to(x.device).reshape(-1)
    for begin in range(0, fx.numel(), CHUNK):
        if not torch.allclose(fx[begin:begin + CHUNK].double(), fy[begin:begin + CHUNK].double(), atol=tol,
                              rtol=tol, equal_nan=True):
            return False
    return True


def all_close(a: Any, b: Any, tol: float) -> bool:
    la, lb = flatten_outputs(a), flatten_outputs(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if not _tensor_close(x, y, tol):
                return False
        elif x != y:
            return False
    return True


def near_zero(value: Any, tol: float) -> bool:
    leaves = [x for x in flatten_outputs(value) if isinstance(x, torch.Tensor) and x.is_floating_point()]
    if not leaves:
        return False
    for x in leaves:
        flat = x.reshape(-1)
        for begin in range(0, flat.numel(), CHUNK):
            if not bool((flat[begin:begin + CHUNK].double().abs() <= tol).all()):
                return False
    return True


def with_outliers(inputs: list, seed: int, fraction: float = 1e-3) -> list:
    """A copy of the inputs with a sparse set of large values in each floating tensor."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 0:
            y = x.detach().clone()
            flat = y.view(-1) if y.is_contiguous() else y.reshape(-1)
            count = max(1, int(flat.numel() * fraction))
            # each position once: a GPU's scatter keeps one of two values written to one place at random, and a
            # set drawn again (the judge's one-set tiers) must come out the same
            index = torch.unique(torch.randint(0, flat.numel(), (count,), generator=generator))
            signs = (torch.randint(0, 2, (index.numel(),), generator=generator) * 2 - 1).to(flat.device, flat.dtype)
            index = index.to(flat.device)
            magnitude = 10.0 * max(1.0, float(x.detach().abs().max()))
            flat[index] = signs * magnitude
            if not y.is_contiguous():
                y = flat.view(y.shape)
            out.append(y)
        else:
            out.append(x)
    return out


NONDETERMINISTIC = (
    "weak problem: the reference's output differs between two identical runs "
    "(random ops such as Dropout in training mode; try --eval-mode): no candidate can match it reliably"
)


NEAR_ZERO_PREFIX = "weak problem: every reference output is within the tolerance"
INPUT_INDEPENDENT = (
    "weak problem: the reference's output does not depend on its inputs "
    "(two different input sets give the same output), so a kernel can return a constant"
)
