"""Shapes-only recurrent layers for models built on the meta device.

torch.lstm / gru / rnn_tanh / rnn_relu have no meta kernel of their own: on meta tensors they run their
composite definition, every op of every step through Python's meta functions (a 6-layer LSTM over 512 steps
took about 8 s per forward, and the composer runs a meta model's forward twice). PyTorch refuses a meta kernel
for a composite op, so the model's recurrent modules get hooks that, while they run, answer these calls with
outputs of the right shapes. Nothing changes where a dispatch-level tracer is at work (it must see the real
ops) or where the tensors hold data."""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import _get_current_dispatch_mode

RECURRENT_MODULES = (torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN)
_CALLS = frozenset({"lstm", "gru", "rnn_tanh", "rnn_relu"})


def _sequence(input: torch.Tensor, hx: torch.Tensor, bidirectional: bool, batch_first: bool) -> torch.Tensor:
    steps, batch = (input.shape[1], input.shape[0]) if batch_first else (input.shape[0], input.shape[1])
    width = hx.shape[-1] * (2 if bidirectional else 1)
    return input.new_empty((batch, steps, width) if batch_first else (steps, batch, width))


def _shapes_only(name: str, args: tuple):
    """The outputs of a padded-sequence call (input, hx, params, has_biases, layers, dropout, train, bidirectional,
    batch_first), or None for another form (a packed sequence)."""
    if len(args) != 9 or not isinstance(args[2], (list, tuple)):
        return None
    input, hx, bidirectional, batch_first = args[0], args[1], bool(args[7]), bool(args[8])
    if name == "lstm":
        h, c = hx
        return _sequence(input, h, bidirectional, batch_first), h.new_empty(h.shape), c.new_empty(c.shape)
    return _sequence(input, hx, bidirectional, batch_first), hx.new_empty(hx.shape)


class _ShapesOnly(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in _CALLS and not kwargs and _get_current_dispatch_mode() is None and args and \
                isinstance(args[0], torch.Tensor) and args[0].is_meta and type(args[0]) is torch.Tensor:
            outputs = _shapes_only(name, tuple(args))
            if outputs is not None:
                return outputs
        return func(*args, **(kwargs or {}))


_ACTIVE: list[_ShapesOnly] = []  # one per recurrent module running now (modes nest like calls)


def _enter(module, args):
    mode = _ShapesOnly()
    mode.__enter__()
    _ACTIVE.append(mode)


def _leave(module, args, output):
    if _ACTIVE:
        _ACTIVE.pop().__exit__(None, None, None)


def shapes_only_recurrence(model: torch.nn.Module) -> None:
    """Hooks on the meta model's recurrent modules (see the module's docstring)."""
    for module in model.modules():
        if isinstance(module, RECURRENT_MODULES):
            module.register_forward_pre_hook(_enter)
            module.register_forward_hook(_leave, always_call=True)
