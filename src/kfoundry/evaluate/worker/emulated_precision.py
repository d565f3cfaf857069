"""GPU arithmetic on the CPU: Triton's interpreter made to round `tl.dot` operands as an NVIDIA GPU does.

The interpreter computes every fp32 `tl.dot` in full fp32 (numpy's matmul), whatever `input_precision` says,
so a kernel whose TF32 products miss the tolerance on a GPU would pass on the CPU. Here an fp32 dot at
"tf32" (Triton's default on NVIDIA GPUs) has its operands rounded to TF32 (10 mantissa bits) as the tensor
cores take them, and a "tf32x3" dot is split as Triton's compiler splits it (F32DotTC): big = the operand
rounded to nearest TF32 (`cvt.rna.tf32.f32`), small = the operand - big, then small@big + big@small (NaN where
an operand is infinite is dropped) + big@big, each a TF32 product. "ieee" dots, and dots of fp16 operands
(whose products fp32 holds exactly, as on a GPU), are left as they are.

How the tensor cores round a plain fp32 operand to TF32 is HARDWARE_TF32; benchmarks/precision_agreement
measured it on an H200 (one product per output element, so the rounding shows bit for bit).

The reference is left in IEEE fp32: on the H200 measured, PyTorch's fp32 convolutions and matmuls were as
accurate as IEEE although cuDNN's flags allow TF32 (cuDNN chose algorithms that do not use it), so the CPU's
e(reference), the allowance a candidate is held to, was the GPU's; a GPU whose cuDNN picks TF32 would allow
a candidate more than the CPU does, never less.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

# "rz": the low 13 mantissa bits dropped (toward zero); "rna": to nearest, ties away from zero. The H200's
# tensor cores truncate (benchmarks/results/archive/precision_agreement-h200-20261204T195907Z.json)
HARDWARE_TF32 = "rz"
_LOW_BITS = np.uint32(0x1FFF)
_HALF_ULP = np.uint32(0x1000)
_EXPONENT = np.uint32(0x7F800000)

# fp32 tl.dot calls since the last reset, by the precision they ran at ("tf32", "tf32x3", "ieee")
DOTS: Counter = Counter()
_installed = False


def tf32(values: np.ndarray, mode: str = HARDWARE_TF32) -> np.ndarray:
    """fp32 values rounded to TF32 (still held as fp32); infinities and NaN stay as they are."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    finite = (bits & _EXPONENT) != _EXPONENT
    if mode == "rna":
        rounded = (bits + _HALF_ULP) & ~_LOW_BITS  # sign and magnitude: a carry into the exponent is right
    elif mode == "rz":
        rounded = bits & ~_LOW_BITS
    else:
        raise ValueError(f"unknown TF32 rounding {mode!r} (rz or rna)")
    return np.where(finite, rounded, bits).view(np.float32).reshape(np.shape(values))


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):  # inf and NaN propagate as on a GPU, without a warning
        return np.matmul(a, b, dtype=np.float32)


def emulated_dot(a: np.ndarray, b: np.ndarray, acc: np.ndarray, precision: str) -> np.ndarray:
    """acc + a @ b for fp32 a and b as a GPU's fp32 `tl.dot` at `precision` computes it."""
    if precision == "tf32":
        return _matmul(tf32(a), tf32(b)) + acc
    if precision == "tf32x3":
        a_big, b_big = tf32(a, "rna"), tf32(b, "rna")
        with np.errstate(invalid="ignore"):
            a_small, b_small = tf32(a - a_big), tf32(b - b_big)
            corrections = _matmul(a_small, b_big) + _matmul(a_big, b_small)
        corrections = np.where(np.isnan(corrections), np.float32(0), corrections)
        return _matmul(a_big, b_big) + corrections + acc
    return _matmul(a, b) + acc


def _precision_name(input_precision) -> str:
    name = getattr(input_precision, "name", str(input_precision)).lower()
    return name.rsplit(".", 1)[-1]


def install() -> bool:
    """Patch the interpreter (once per process); False where this Triton has no interpreter to patch."""
    global _installed
    if _installed:
        return True
    try:
        from triton.runtime import interpreter
    except ImportError:
        return False
    builder = getattr(interpreter, "InterpreterBuilder", None)
    original = getattr(builder, "create_dot", None)
    if original is None:
        return False

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if a.data.dtype != np.float32 or b.data.dtype != np.float32 or d.data.dtype != np.float32:
            return original(self, a, b, d, input_precision, max_num_imprecise_acc)
        precision = _precision_name(input_precision)
        DOTS[precision] += 1
        if precision not in ("tf32", "tf32x3"):
            return original(self, a, b, d, input_precision, max_num_imprecise_acc)
        return interpreter.TensorHandle(emulated_dot(a.data, b.data, d.data, precision), d.dtype.scalar)

    builder.create_dot = create_dot
    _installed = True
    return True


def report() -> dict:
    """What the candidate's dots ran at, for the verdict: {"emulated": {...}, "exact": {...}}."""
    emulated = {k: v for k, v in sorted(DOTS.items()) if k in ("tf32", "tf32x3")}
    exact = {k: v for k, v in sorted(DOTS.items()) if k not in ("tf32", "tf32x3")}
    return {"emulated": emulated, "exact": exact}

