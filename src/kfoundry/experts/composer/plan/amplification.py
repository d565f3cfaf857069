"""Where a product's rounding error is amplified: a normalisation after a convolution or GEMM (GroupNorm,
BatchNorm in training mode, InstanceNorm, LayerNorm) subtracts the mean of its output and divides by a standard
deviation that same output gives, so an error TF32 leaves at 1e-3 of the values' spread stays 1e-3 of the
normalised values, which are of order one: ten times a 1e-4 tolerance. On a small-spread group it grows further
(13.4 against the reference's 0.018 measured on a Conv2d + GroupNorm on the H200). Such a product needs a main
loop close to fp32 (TF32x3, an fp16 split): plain TF32 and its fp16 copies cannot pass."""

from __future__ import annotations

from kfoundry.experts.composer.ir.graph import CONVS, GEMMS, RECURRENT, REDUCTIONS, SCANS, Graph, Op, Value
from kfoundry.types import ReferenceRounding

# what ends a walk from a product's output: another product's error is its own
PRODUCTS = GEMMS | CONVS | RECURRENT | SCANS
ROOTS = frozenset({"rsqrt", "sqrt"})


def amplification_fails(reference: ReferenceRounding | None) -> bool:
    """Whether a norm's amplification of a TF32-level main loop's error can fail the verdict: unless the judge saw
    the reference round like TF32 itself (its convolutions on a GPU's cuDNN, or an error ratio of at least 1, which
    a verdict allows twice); an fp32 reference (a CPU's, a GPU's with TF32 off) or an unknown one can fail it."""
    return reference is None or not reference.tf32_level()


def normalised(graph: Graph, value: Value, users: dict[Value, list[Op]] | None = None) -> bool:
    """Whether `value` reaches, through anything but another product, the reciprocal square root (or square
    root) of a reduction of what it reaches: its statistics divide it."""
    users = graph.users() if users is None else users
    reached: set[Value] = {value}
    from_reduction: set[Value] = set()
    frontier = [value]
    while frontier:
        v = frontier.pop()
        for op in users.get(v, []):
            if op.name in PRODUCTS or op.out in reached:
                continue
            reached.add(op.out)
            if op.name in REDUCTIONS or any(a in from_reduction for a in op.inputs):
                from_reduction.add(op.out)
            if op.name in ROOTS and op.out in from_reduction:
                return True
            frontier.append(op.out)
    return False
