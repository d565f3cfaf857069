"""Recurrent modules (nn.LSTM, nn.GRU, nn.RNN) and their cells read into the composer's ops.

Per layer of a module, the input projection of every step is one GEMM over the whole sequence (the
hidden-to-hidden bias folded into it where the cell allows), then one `recurrent` op runs the steps (the
recurrent template: a host loop over time of one fused step kernel). A cell (one step, called by the model's
own loop) is decomposed: a GEMM of the hidden state whose epilogue adds the input's projection, and the gates'
pointwise ops. A missing initial state is zero: the first step skips its hidden-state product."""

from __future__ import annotations

from dataclasses import dataclass

from kfoundry.experts.composer.ir.graph import Value
from kfoundry.experts.composer.read import decompose, fx_layout
from kfoundry.experts.composer.read.handling import HandlerTable, Reader, Unsupported

HANDLERS = HandlerTable()  # this module's handlers: lower_fx merges them into the reader's
handles = HANDLERS.handles


@dataclass
class Cell:
    """One layer's weights and kind: "LSTM", "GRU", "RNN_TANH" or "RNN_RELU"."""

    kind: str
    hidden: int
    w_ih: Value
    w_hh: Value
    b_ih: Value | None
    b_hh: Value | None

    @property
    def folds_hidden_bias(self) -> bool:
        """The hidden-to-hidden bias adds straight to the gates (not under GRU's reset gate)."""
        return self.kind != "GRU"


def _part(r: Reader, x: Value, dim: int, k: int, hidden: Value) -> Value:
    """The k-th of x's gates along dim (`hidden`, the weights' own size, wide each)."""
    start = r.sym_binary("mul", hidden, k) if k else 0
    return r.op("slice", [x], dim=dim, start=start, stop=r.sym_binary("mul", hidden, k + 1), step=1)


def _gate(r: Reader, gates: Value, k: int, hidden: Value) -> Value:
    return _part(r, gates, gates.rank - 1, k, hidden)


def _bias_part(r: Reader, bias: Value | None, k: int, hidden: Value) -> Value | None:
    return None if bias is None else _part(r, bias, 0, k, hidden)


def _add(r: Reader, a: Value | None, b: Value | None) -> Value | None:
    if a is None or b is None:
        return a if b is None else b
    return r.op("add", [a, b])


def step(r: Reader, cell: Cell, projected: Value, h: Value | None, c: Value | None
         ) -> tuple[Value, Value | None]:
    """One time step: `projected` is the input's projection for this step (with the biases the cell folds);
    h and c are the state (None: zero). Returns the new (h, c)."""
    hid = r.size_of(cell.w_hh, 1)
    w_hh_t = r.op("transpose", [cell.w_hh], dim0=0, dim1=1)
    if cell.kind == "GRU":
        hp = decompose.matmul(r.b, h, w_hh_t, r.origin) if h is not None else None
        hp = _add(r, hp, cell.b_hh) if hp is not None else None
        parts = [_gate(r, projected, k, hid) for k in range(3)]
        hidden_parts = [_gate(r, hp, k, hid) if hp is not None else _bias_part(r, cell.b_hh, k, hid)
                        for k in range(3)]
        reset = r.op("sigmoid", [_add(r, parts[0], hidden_parts[0])])
        update = r.op("sigmoid", [_add(r, parts[1], hidden_parts[1])])
        candidate = parts[2] if hidden_parts[2] is None else r.op("add", [parts[2], r.op("mul", [reset,
                                                                                                 hidden_parts[2]])])
        n = r.op("tanh", [candidate])
        new_h = r.op("mul", [r.op("sub", [1.0, update]), n])
        if h is not None:
            new_h = r.op("add", [new_h, r.op("mul", [update, h])])
        return new_h, None
    gates = projected
    if h is not None:
        gates = r.op("add", [decompose.matmul(r.b, h, w_hh_t, r.origin), projected])
    if cell.kind == "RNN_TANH":
        return r.op("tanh", [gates]), None
    if cell.kind == "RNN_RELU":
        return r.op("relu", [gates]), None
    i, f, g, o = (_gate(r, gates, k, hid) for k in range(4))
    new_c = r.op("mul", [r.op("sigmoid", [i]), r.op("tanh", [g])])
    if c is not None:
        new_c = r.op("add", [r.op("mul", [r.op("sigmoid", [f]), c]), new_c])
    new_h = r.op("mul", [r.op("sigmoid", [o]), r.op("tanh", [new_c])])
    return new_h, new_c


def _project(r: Reader, cell: Cell, x: Value) -> Value:
    """x @ w_ih.T + b_ih (+ b_hh where the cell folds it): one GEMM with the biases in its epilogue."""
    projected = decompose.linear(r.b, x, cell.w_ih, cell.b_ih, r.origin)
    return _add(r, projected, cell.b_hh) if cell.folds_hidden_bias else projected


def _kind(m) -> str:
    name = type(m).__name__.removesuffix("Cell")
    if name == "RNN":
        return "RNN_TANH" if m.nonlinearity == "tanh" else "RNN_RELU"
    return name


def _state_tensors(r: Reader, state, kind: str) -> tuple[Value | None, Value | None]:
    if state is None:
        return None, None
    if kind == "LSTM":
        h, c = state
        return r.tensor(h, "h0"), r.tensor(c, "c0")
    return r.tensor(state, "h0"), None


@handles("nn.LSTM", "nn.GRU", "nn.RNN")
def _m_recurrent(r: Reader, m, path, x, state=None):
    what = r.origin or f"nn.{type(m).__name__}"
    if getattr(m, "proj_size", 0):
        raise Unsupported(what, "proj_size")
    if m.dropout and m.training and m.num_layers > 1:
        raise Unsupported(what, "dropout between layers in training mode")
    x = r.tensor(x)
    if x.rank != 3:
        raise Unsupported(what, "an unbatched sequence")
    kind = _kind(m)
    h0, c0 = _state_tensors(r, state, kind)
    directions = 2 if m.bidirectional else 1
    seq, last_h, last_c = x, [], []
    for layer in range(r.config(path, "num_layers")):
        outputs = []
        for direction in range(directions):
            out, h, c = _direction(r, m, path, kind, seq, h0, c0, layer, direction)
            outputs.append(out)
            last_h.append(h)
            if c is not None:
                last_c.append(c)
        seq = outputs[0] if directions == 1 else fx_layout.cat(r, outputs, 2)
    h_n = fx_layout.cat(r, [r.op("unsqueeze", [h], dim=0) for h in last_h], 0)
    if kind != "LSTM":
        return seq, h_n
    return seq, (h_n, fx_layout.cat(r, [r.op("unsqueeze", [c], dim=0) for c in last_c], 0))


def _direction(r: Reader, m, path: str, kind: str, seq: Value, h0: Value | None, c0: Value | None, layer: int,
               direction: int) -> tuple[Value, Value, Value | None]:
    """One direction of one layer: its output sequence and its last (h, c); the reverse direction runs from the
    last step to the first, so its last state is the one at step 0."""
    time = 1 if m.batch_first else 0
    suffix = f"l{layer}" + ("_reverse" if direction else "")
    cell = Cell(kind, m.hidden_size, r.state(path, f"weight_ih_{suffix}"), r.state(path, f"weight_hh_{suffix}"),
                r.state(path, f"bias_ih_{suffix}"), r.state(path, f"bias_hh_{suffix}"))
    projected = _project(r, cell, seq)
    index = layer * (2 if m.bidirectional else 1) + direction
    h = r.op("select", [h0], dim=0, index=index) if h0 is not None else None
    c = r.op("select", [c0], dim=0, index=index) if c0 is not None else None
    flags = {"reverse": True} if direction else {}
    states = r.op("recurrent", [projected, cell.w_hh, None if cell.folds_hidden_bias else cell.b_hh, h, c],
                  kind=kind, time=time, hidden=cell.hidden, **flags)
    out = r.op("select", [states], dim=0, index=0)
    last = 0 if direction else -1
    last_c = r.op("select", [r.op("select", [states], dim=0, index=1)], dim=time, index=last) \
        if kind == "LSTM" else None
    return out, r.op("select", [out], dim=time, index=last), last_c


@handles("nn.LSTMCell", "nn.GRUCell", "nn.RNNCell")
def _m_cell(r: Reader, m, path, x, state=None):
    x = r.tensor(x)
    if x.rank != 2:
        raise Unsupported(r.origin or f"nn.{type(m).__name__}", "an unbatched input")
    kind = _kind(m)
    cell = Cell(kind, m.hidden_size, r.state(path, "weight_ih"), r.state(path, "weight_hh"), r.state(path, "bias_ih"),
                r.state(path, "bias_hh"))
    h, c = _state_tensors(r, state, kind)
    new_h, new_c = step(r, cell, _project(r, cell, x), h, c)
    return (new_h, new_c) if kind == "LSTM" else new_h
