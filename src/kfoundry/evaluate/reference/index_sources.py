"""Finding where an integer output of the reference came from, so that argmax/argmin outputs
can be judged by the values they point at (near-ties) rather than index by index."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kfoundry.evaluate.reference.compare import flatten_outputs

_aten = torch.ops.aten
# op -> index of the indices tensor in its result (None: the result is the indices)
INDEX_OPS = {
    _aten.argmax.default: None,
    _aten.argmin.default: None,
    _aten.max.dim: 1,
    _aten.min.dim: 1,
}


class IndexRecorder(TorchDispatchMode):
    """Records (values, dim, keepdim, indices) for each argmax-like op run inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple[torch.Tensor, int | None, bool, torch.Tensor]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func in INDEX_OPS:
            position = INDEX_OPS[func]
            indices = out if position is None else out[position]
            dim = args[1] if len(args) > 1 else kwargs.get("dim")
            keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
            self.records.append((args[0].detach(), dim, bool(keepdim), indices.detach()))
        return out

    def sources_for(self, output: Any) -> dict[int, dict[str, Any]]:
        """For each integer leaf of the output that equals a recorded index result, its source."""
        sources: dict[int, dict[str, Any]] = {}
        for i, leaf in enumerate(flatten_outputs(output)):
            if not isinstance(leaf, torch.Tensor) or leaf.is_floating_point() or leaf.dtype == torch.bool:
                continue
            for values, dim, keepdim, indices in reversed(self.records):
                if indices.shape == leaf.shape and indices.device == leaf.device and torch.equal(indices, leaf):
                    ndim = values.dim()
                    sources[i] = {
                        "values": values.to("cpu").as_subclass(torch.Tensor).clone(),
                        "dim": None if dim is None else dim % max(ndim, 1),
                        "keepdim": keepdim,
                    }
                    break
        return sources
