"""How a verdict's precision was checked: on a GPU, or on the CPU with the GPU's arithmetic emulated
(kfoundry.evaluate.worker.emulated_precision), and what the emulation could not model. Plain data, for the
evaluation record, the CLI, the report and the prompts."""

from __future__ import annotations


# ATen ops a GPU runs in cuDNN or cuBLAS, where PyTorch may choose TF32
_LIBRARY_OPS = frozenset({"convolution", "_convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                          "conv_transpose2d", "conv_transpose3d", "mm", "bmm", "addmm", "baddbmm", "addbmm",
                          "_addmm_activation", "matmul", "linear"})


def precision_record(device: str, dots: dict | None, compute_ops: list[str] | None) -> dict:
    """How a verdict's precision was checked: on a GPU, or emulated on the CPU (with what was and was not)."""
    if device.startswith("cuda"):
        return {"checked": "gpu"}
    record: dict = {"checked": "cpu"}
    if dots is not None:  # counted where the worker finished its runs
        record["dots"] = dots
    own = sorted(op for op in compute_ops or () if op in _LIBRARY_OPS)
    if own:
        record["not_modelled"] = [f"PyTorch's {', '.join(own)} called by the candidate ran in IEEE fp32 here "
                                  "(TF32 on a GPU where PyTorch allows it)"]
    return record


def describe(record: dict | None) -> str:
    """One line for a verdict: where its precision was checked."""
    if not record:
        return ""
    if record.get("checked") == "gpu":
        return "precision checked on the GPU"
    dots = record.get("dots")
    if dots is None:
        parts = ["tl.dot rounded as a GPU's tensor cores round"]
    else:
        emulated = ", ".join(f"{name.upper().replace('X3', 'x3')} x{n}" for name, n in dots.get("emulated", {}).items())
        parts = [f"tl.dot emulated as on a GPU ({emulated})" if emulated else "no TF32 tl.dot to emulate"]
    parts += record.get("not_modelled") or []
    return "precision emulated on the CPU: " + "; ".join(parts)
