"""Rules on the forward scope (``scope.forward_scope``): ``torch-compute`` (PyTorch ops, tensor operators and
methods on what the inference knows to be tensors), ``nn-compute-layer`` (calling a torch.nn layer that
computes) and ``stateful-forward`` (forward keeping state on self or in module globals)."""

from __future__ import annotations

import ast

from ..allowlist import TENSOR_METHODS
from .inference import Inference
from .kinds import BOT, S, T, U
from .program import Ctx, Func
from .report import Report
from .syntax import chain_root, flatten_targets
from .torch_names import (LIKELY_TENSOR_COMPUTE, NN_CALL_METHODS, STREAM_METHODS, SUBCLASS_NAMES, nn_layer,
                          torch_compute)

_MUTATORS = frozenset({"append", "extend", "insert", "update", "setdefault", "add", "__setitem__",
                       "put", "appendleft", "extendleft"})


class ForwardRules:
    def __init__(self, inference: Inference, report: Report):
        self.inf = inference
        self.program = inference.program
        self.report = report

    def check(self, f: Func):
        """The rules on one function of the forward scope."""
        add, src = self.report.add, self.report.src
        ctx = self.inf.ctx(f)
        where = f.display
        for n in self.program.scope_nodes(f.node):
            if isinstance(n, ast.Call):
                self._check_call(n, ctx, where)
            elif isinstance(n, ast.BinOp):
                if (T in (self.inf.eval(n.left, ctx), self.inf.eval(n.right, ctx))
                        and not self._inside_tensor_op(n, ctx)):
                    ev = src(n)
                    add("torch-compute", n, f"`{ev}` in {where} applies a tensor operator in PyTorch", [ev])
            elif isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd, ast.Invert)):
                if self.inf.eval(n.operand, ctx) == T and not self._inside_tensor_op(n, ctx):
                    ev = src(n)
                    add("torch-compute", n, f"`{ev}` in {where} applies a tensor operator in PyTorch", [ev])
            elif isinstance(n, ast.Compare):
                operands = [n.left, *n.comparators]
                if (self.inf.eval(n, ctx) == T
                        and not any(isinstance(o, ast.Constant) and o.value is None for o in operands)
                        and not self._inside_tensor_op(n, ctx)):
                    ev = src(n)
                    add("torch-compute", n, f"`{ev}` in {where} compares tensors in PyTorch", [ev])
            elif isinstance(n, ast.AugAssign):
                if T in (self.inf.eval(n.target, ctx), self.inf.eval(n.value, ctx)):
                    ev = src(n)
                    add("torch-compute", n, f"`{ev}` in {where} applies a tensor operator in PyTorch", [ev])
            elif isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load):
                idx = n.slice.elts if isinstance(n.slice, ast.Tuple) else [n.slice]
                if self.inf.eval(n.value, ctx) == T and any(self.inf.eval(i, ctx) == T for i in idx):
                    ev = src(n)
                    add("torch-compute", n,
                        f"`{ev}` in {where} indexes a tensor with a tensor (a PyTorch gather)", [ev])
        if f.name != "__init__":
            self._check_stateful(f, ctx, where)

    def _inside_tensor_op(self, node, ctx) -> bool:
        """Is the node an operand of an enclosing tensor operator (which is the one reported)?"""
        parent = self.program.parents.get(node)
        return isinstance(parent, (ast.BinOp, ast.UnaryOp)) and self.inf.eval(parent, ctx) == T

    def _check_call(self, n: ast.Call, ctx: Ctx, where: str):
        add, src = self.report.add, self.report.src
        func = n.func
        if isinstance(func, ast.Name) and self.program.is_builtin(func.id, ctx):
            if func.id in ("sum", "max", "min", "abs", "pow", "round", "divmod") and any(
                    self.inf.eval(a, ctx) == T for a in n.args):
                ev = src(n)
                add("torch-compute", n, f"`{ev}` in {where} runs PyTorch ops on a tensor", [ev])
            return
        qn = self.program.qualname(func, ctx)
        if qn is None:
            fk = self.inf.eval(func, ctx)
            if isinstance(fk, tuple) and fk[0] == "alias":
                qn = fk[1]
        if qn:
            ev = src(func)
            parts = qn.split(".")
            if len(parts) >= 2 and nn_layer(".".join(parts[:-1])) and parts[-1] in NN_CALL_METHODS:
                add("nn-compute-layer", n, f"{src(n)} in {where} runs nn.{parts[-2]}: PyTorch computes it",
                    [src(n), f"nn.{parts[-2]}"])
            elif torch_compute(qn):
                msg = f"{ev} in {where} computes with PyTorch" + (f" ({qn})" if qn != ev else "")
                add("torch-compute", n, msg, [ev] if qn == ev else [ev, qn])
            return
        if isinstance(func, ast.Attribute):
            rk = self.inf.eval(func.value, ctx)
            name = func.attr
            ev = f"{src(func.value, 40)}.{name}()"
            if name in STREAM_METHODS or name in SUBCLASS_NAMES:
                return  # their own rules
            if rk == T:
                if name not in TENSOR_METHODS:
                    add("torch-compute", n, f"{ev} in {where} is a PyTorch tensor op", [ev])
                return
            if rk in (U, BOT):
                if name in LIKELY_TENSOR_COMPUTE:
                    add("torch-compute", n, f"{ev} in {where} is a PyTorch tensor op", [ev])
                return
            if isinstance(rk, tuple) and rk[0] == "nn" and name in NN_CALL_METHODS:
                add("nn-compute-layer", n, f"{src(n)} in {where} runs nn.{rk[1]}: PyTorch computes it",
                    [src(n), f"nn.{rk[1]}"])
                return
            if (isinstance(rk, tuple) and rk[0] == "super" and name in NN_CALL_METHODS
                    and self.program.nn_base(rk[1]) and not any(name in self.program.methods.get(c, {})
                                                                for c in self.program.mro(rk[1])[1:])):
                layer = self.program.nn_base(rk[1])
                add("nn-compute-layer", n, f"{src(n)} in {where} runs nn.{layer}: PyTorch computes it",
                    [src(n), f"nn.{layer}"])
                return
        fk = self.inf.eval(func, ctx)
        layer = None
        if isinstance(fk, tuple) and fk[0] == "nn":
            layer = fk[1]
        elif (isinstance(fk, tuple) and fk[0] == "inst" and self.program.nn_base(fk[1])
              and not (self.program.method(fk[1], "forward") or self.program.method(fk[1], "__call__"))):
            layer = self.program.nn_base(fk[1])
        if layer:
            ev = src(n)
            add("nn-compute-layer", n, f"{ev} in {where} calls nn.{layer}: PyTorch computes it",
                [ev, f"nn.{layer}"])

    def _check_stateful(self, f: Func, ctx: Ctx, where: str):
        add, src = self.report.add, self.report.src
        sname = f.self_name
        declared_global = set()
        for n in self.program.scope_nodes(f.node):
            if isinstance(n, ast.Global):
                declared_global.update(n.names)

        def state_root(t) -> str | None:
            """'self' when t writes into self, else None."""
            root = chain_root(t)
            if not isinstance(root, ast.Name):
                return None
            if sname and root.id == sname:
                return "self"
            return None

        msg_tail = "forward must not keep state between calls (build it in __init__)"
        for n in self.program.scope_nodes(f.node):
            targets = []
            if isinstance(n, ast.Assign):
                targets = n.targets
            elif isinstance(n, (ast.AugAssign, ast.AnnAssign)):
                targets = [n.target]
            elif isinstance(n, ast.Delete):
                targets = n.targets
            for t in flatten_targets(targets):
                if isinstance(t, (ast.Attribute, ast.Subscript)):
                    if state_root(t):
                        ev = src(n)
                        add("stateful-forward", n, f"{where} writes to self ({src(t, 40)}): {msg_tail}", [ev])
                elif isinstance(t, ast.Name) and t.id in declared_global:
                    ev = src(n)
                    add("stateful-forward", n, f"{where} assigns the module global {t.id}: {msg_tail}", [ev])
            if isinstance(n, ast.Call):
                func = n.func
                sets_attr = (isinstance(func, ast.Name) and func.id in ("setattr", "delattr")
                             and self.program.is_builtin(func.id, ctx)) or (
                    isinstance(func, ast.Attribute) and func.attr in ("__setattr__", "__delattr__")
                    and isinstance(func.value, ast.Name) and func.value.id in ("object", "type"))
                registers = (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                             and func.value.id == sname and func.attr in (
                                 "register_buffer", "register_parameter", "add_module", "register_module"))
                if (sets_attr and n.args and state_root(n.args[0]) == "self") or registers:
                    ev = src(n)
                    add("stateful-forward", n, f"{where} sets attributes of self ({ev}): {msg_tail}", [ev])
                elif (isinstance(func, ast.Attribute) and func.attr in _MUTATORS
                      and isinstance(func.value, (ast.Attribute, ast.Subscript, ast.Name))
                      and not (isinstance(func.value, ast.Name) and func.value.id == sname)):
                    args = [*n.args, *(k.value for k in n.keywords)]
                    if state_root(func.value) and args and any(self.inf.eval(a, ctx) != S for a in args):
                        ev = src(n)
                        add("stateful-forward", n, f"{where} stores into a container on self ({ev}): {msg_tail}",
                            [ev])

