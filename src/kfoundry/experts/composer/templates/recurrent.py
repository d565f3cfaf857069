"""The recurrent template: one layer of an LSTM, GRU or Elman RNN as a host loop over time of one fused step kernel.

The input projection of every step (x @ W_ih.T + biases) is a GEMM before this kernel. Each step's kernel
computes a (BM batch rows x BN hidden units) tile of every gate at once: the hidden state times the gate's rows
of W_hh (one `tl.dot` per gate, the hidden state loaded once per k-block for all of them), then the step's
projection added and the cell's update in registers. It writes the step's hidden state (and an LSTM's cell
state) straight into the layer's output at that step, where the next step reads it: the gates never reach memory.
The first step of a layer without an initial state skips the product (the state is zero)."""

from __future__ import annotations

from kfoundry.experts.composer.emit import expr
from kfoundry.experts.composer.emit.host import HostContext
from kfoundry.experts.composer.emit.kernel import KernelCode, KernelWriter, allocate
from kfoundry.experts.composer.plan.steps import Group, kernel_name
from kfoundry.experts.composer.templates.device_limits import DeviceLimits, composer_dot_need, fit_configs
from kfoundry.experts.composer.templates.gemm import dot_precision_host, dot_precisions, operand_bytes
from kfoundry.types import DeviceFacts

GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}
# BM batch rows and BN hidden units per program, BK hidden units per step of the product (the tuner knows the names)
TILES = [{"BM": 16, "BN": 32, "BK": 32, "num_warps": 4}, {"BM": 32, "BN": 64, "BK": 32, "num_warps": 4},
         {"BM": 16, "BN": 64, "BK": 64, "num_warps": 4}, {"BM": 64, "BN": 32, "BK": 32, "num_warps": 4}]


def configs(group: Group, precision: str = "fp32", tolerance: float | None = None,
            device: DeviceFacts | DeviceLimits | None = None) -> list[dict]:
    """The tiles, each fitted to `device` (device_limits): one weight tile and one accumulator per gate."""
    precisions = dot_precisions(precision, tolerance)
    tiles = [dict(tile, precision=precisions[0] if i < len(TILES) - 1 else precisions[-1])
             for i, tile in enumerate(TILES)]
    gates, width = GATES[group.anchor.attrs["kind"]], operand_bytes(list(group.anchor.args[:2]), precision)
    return fit_configs(tiles, lambda c: composer_dot_need(c, element_bytes=width, b_tiles=gates,
                                                          accumulators=gates), device)


def _activation(kw: KernelWriter, name: str, value: str) -> str:
    return expr.pointwise(name, [value], {}, [False], kw.helpers)


def recurrent_kernel(group: Group, host: HostContext, config: dict) -> KernelCode:
    op = group.anchor
    projected, w_hh, b_hh, h0, c0 = op.args
    kind, time = op.attrs["kind"], op.attrs["time"]
    gates, lstm = GATES[kind], kind == "LSTM"
    out = op.out
    kw = KernelWriter(kernel_name(group))
    kw._taken.update({"state", "reset", "update", "h", "c", "k0", "k_ok"} | {f"{p}{g}" for p in "xw" for g in range(4)}
                     | {f"acc{g}" for g in range(4)})
    lines = allocate(host, [out])
    on, pn, wn = host.name(out), host.name(projected), host.name(w_hh)
    batch, feature = 0, 1  # the dims of a step's (B, G*H) projection and of a (B, H) state
    step_x, prev_h, prev_c = host.fresh("step_x"), host.fresh("prev_h"), host.fresh("prev_c")
    new_h, new_c, t = host.fresh("new_h"), host.fresh("new_c"), host.fresh("t")
    x_ptr = kw.arg("x_ptr", step_x)
    x_sb, x_sg = kw.arg("x_sb", f"{step_x}.stride({batch})"), kw.arg("x_sg", f"{step_x}.stride({feature})")
    h_ptr = kw.arg("h_ptr", prev_h)
    h_sb, h_sk = kw.arg("h_sb", f"{prev_h}.stride({batch})"), kw.arg("h_sk", f"{prev_h}.stride({feature})")
    c_ptr = kw.arg("c_ptr", prev_c) if lstm else None
    c_sb = kw.arg("c_sb", f"{prev_c}.stride({batch})") if lstm else None
    c_sh = kw.arg("c_sh", f"{prev_c}.stride({feature})") if lstm else None
    w_ptr, w_sr, w_sc = kw.arg("w_ptr", wn), kw.arg("w_sr", f"{wn}.stride(0)"), kw.arg("w_sc", f"{wn}.stride(1)")
    bias_ptr = kw.arg("bias_ptr", host.name(b_hh)) if b_hh is not None else None
    oh_ptr = kw.arg("oh_ptr", new_h)
    oh_sb, oh_sh = kw.arg("oh_sb", f"{new_h}.stride({batch})"), kw.arg("oh_sh", f"{new_h}.stride({feature})")
    oc_ptr = kw.arg("oc_ptr", new_c) if lstm else None
    oc_sb = kw.arg("oc_sb", f"{new_c}.stride({batch})") if lstm else None
    oc_sh = kw.arg("oc_sh", f"{new_c}.stride({feature})") if lstm else None
    n_batch = kw.arg("n_batch", f"{new_h}.shape[{batch}]")
    hidden = kw.arg("hidden", f"{wn}.shape[1]")
    first = kw.constexpr("FIRST", f"{t} == 0" if h0 is None else "False")
    bb, bh, bk = (kw.constexpr(name, str(config[name])) for name in ("BM", "BN", "BK"))
    precise = config.get("precision", "ieee") != "default"
    if precise:
        kw.constexpr("DOT_PRECISION", dot_precision_host(config, pn))
    kw.line(f"rb = tl.program_id(0) * {bb} + tl.arange(0, {bb})")
    kw.line(f"rh = tl.program_id(1) * {bh} + tl.arange(0, {bh})")
    kw.line(f"b_ok = rb < {n_batch}")
    kw.line(f"h_ok = rh < {hidden}")
    kw.line("ok = b_ok[:, None] & h_ok[None, :]")
    for g in range(gates):
        kw.line(f"acc{g} = tl.zeros(({bb}, {bh}), dtype=tl.float32)")
    kw.line(f"if not {first}:")
    kw.indent += 1
    kw.line(f"for k0 in range(0, {hidden}, {bk}):")
    kw.indent += 1
    kw.line(f"rk = k0 + tl.arange(0, {bk})")
    kw.line(f"k_ok = rk < {hidden}")
    kw.line(f"state = tl.load({h_ptr} + rb[:, None] * {h_sb} + rk[None, :] * {h_sk}, "
            f"mask=b_ok[:, None] & k_ok[None, :], other=0.0)")
    for g in range(gates):
        rows = f"({g} * {hidden} + rh)" if g else "rh"
        kw.line(f"w{g} = tl.load({w_ptr} + {rows}[None, :] * {w_sr} + rk[:, None] * {w_sc}, "
                f"mask=k_ok[:, None] & h_ok[None, :], other=0.0)")
        precision = ", input_precision=DOT_PRECISION" if precise else ""
        kw.line(f"acc{g} = tl.dot(state, w{g}, acc{g}{precision})")
    kw.indent -= 2
    for g in range(gates):
        cols = f"({g} * {hidden} + rh)" if g else "rh"
        kw.line(f"x{g} = tl.load({x_ptr} + rb[:, None] * {x_sb} + {cols}[None, :] * {x_sg}, mask=ok, other=0.0)"
                f".to(tl.float32)")
    if kind == "GRU":
        for g in range(gates):
            if bias_ptr is not None:
                rows = f"({g} * {hidden} + rh)" if g else "rh"
                kw.line(f"acc{g} += tl.load({bias_ptr} + {rows}, mask=h_ok, other=0.0).to(tl.float32)[None, :]")
        kw.line(f"reset = {_activation(kw, 'sigmoid', 'x0 + acc0')}")
        kw.line(f"update = {_activation(kw, 'sigmoid', 'x1 + acc1')}")
        kw.line(f"h = (1.0 - update) * {_activation(kw, 'tanh', 'x2 + reset * acc2')}")
        kw.line(f"if not {first}:")
        kw.line(f"    h += update * tl.load({h_ptr} + rb[:, None] * {h_sb} + rh[None, :] * {h_sk}, mask=ok, "
                f"other=0.0).to(tl.float32)")
    elif lstm:
        kw.line(f"c = {_activation(kw, 'sigmoid', 'x0 + acc0')} * {_activation(kw, 'tanh', 'x2 + acc2')}")
        kw.line(f"if not {first}:")
        kw.line(f"    c += {_activation(kw, 'sigmoid', 'x1 + acc1')} * tl.load({c_ptr} + rb[:, None] * {c_sb} + "
                f"rh[None, :] * {c_sh}, mask=ok, other=0.0).to(tl.float32)")
        kw.line(f"h = {_activation(kw, 'sigmoid', 'x3 + acc3')} * {_activation(kw, 'tanh', 'c')}")
        kw.line(f"tl.store({oc_ptr} + rb[:, None] * {oc_sb} + rh[None, :] * {oc_sh}, c.to({oc_ptr}.dtype.element_ty), "
                f"mask=ok)")
    else:
        kw.line(f"h = {_activation(kw, 'tanh' if kind == 'RNN_TANH' else 'relu', 'x0 + acc0')}")
    kw.line(f"tl.store({oh_ptr} + rb[:, None] * {oh_sb} + rh[None, :] * {oh_sh}, h.to({oh_ptr}.dtype.element_ty), "
            f"mask=ok)")
    steps = host.shape(projected)[time]
    indent = "        "
    lines.append(f"{indent}for {t} in range({steps}):")
    # the step computed at iteration t, and the one before it (a reverse layer runs from the last step back)
    at, before = (host.fresh("s"), None) if op.attrs.get("reverse") else (t, f"{t} - 1")
    body = [f"{at} = {steps} - 1 - {t}"] if before is None else []
    before = before or f"{at} + 1"
    body += [f"{step_x} = {pn}.select({time}, {at})", f"{new_h} = {on}[0].select({time}, {at})"]
    body.append(f"{prev_h} = {on}[0].select({time}, {before}) if {t} else "
                f"{host.name(h0) if h0 is not None else new_h}")
    if lstm:
        body.append(f"{new_c} = {on}[1].select({time}, {at})")
        body.append(f"{prev_c} = {on}[1].select({time}, {before}) if {t} else "
                    f"{host.name(c0) if c0 is not None else new_c}")
    lines.extend(f"{indent}    {line}" for line in body)
    grid = f'lambda META: (triton.cdiv({new_h}.shape[{batch}], META["BM"]), triton.cdiv({wn}.shape[1], META["BN"]))'
    lines.append(kw.launch(grid, {"num_warps": str(config["num_warps"])}, indent=indent + "    "))
    return KernelCode(kw.source(), lines, kw.helpers, kw.name)
