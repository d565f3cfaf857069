"""The whole-file fixed point of the kind inference: every function's environment (the kinds of its names),
the module's, the kinds of the classes' attributes, of the functions' returns and of the arguments their
call sites pass, iterated until nothing changes. Flow-insensitive: a name given different kinds in different
places is unknown."""

from __future__ import annotations

import ast

from .inference import Inference
from .kinds import BOT, S, T, U, binop, elem, join
from .program import Ctx, Func, Program
from .syntax import flatten_targets, module_level, own_nodes, str_const


def solve(inf: Inference):
    """Iterate the file's environments to their fixed point; then what is still unknown is ``U`` and the
    inference memoizes its answers."""
    program = inf.program
    module_bindings = _bindings_of(program, None)
    for f in program.funcs.values():
        if not f.kernel:
            f.bindings = _bindings_of(program, f)
    for _ in range(12):
        before = _signature(inf)
        _solve_env(inf, None, module_bindings)
        for f in program.funcs.values():
            if not f.kernel:
                f.env = _solve_env(inf, f, f.bindings)
        _collect_class_attrs(inf)
        _collect_returns(inf)
        _collect_params(inf)
        if _signature(inf) == before:
            break
    # what is still unknown after the fixed point is unknown
    for f in program.funcs.values():
        f.env = {k: (U if v == BOT else v) for k, v in f.env.items()}
        f.params = {k: (U if v == BOT else v) for k, v in f.params.items()}
        f.ret = U if f.ret == BOT else f.ret
    for attrs in inf.class_attrs.values():
        for k, v in attrs.items():
            if v == BOT:
                attrs[k] = U
    program.module_env = {k: (U if v == BOT else v) for k, v in program.module_env.items()}
    inf.memoize()


def _bindings_of(program: Program, f: Func | None) -> list:
    """(how, target, value) for every name bound in f's scope (the module's, outside functions, when f is None)."""
    out = []
    nodes = program.scope_nodes(f.node) if f is not None else program.module_nodes()
    for n in nodes:
        if isinstance(n, ast.Assign):
            out.extend(("assign", t, n.value) for t in n.targets)
        elif isinstance(n, ast.AnnAssign) and n.value is not None:
            out.append(("assign", n.target, n.value))
        elif isinstance(n, ast.NamedExpr):
            out.append(("assign", n.target, n.value))
        elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
            out.append(("aug", n.target, n))
        elif isinstance(n, (ast.For, ast.AsyncFor, ast.comprehension)):
            out.append(("iter", n.target, n.iter))
        elif isinstance(n, (ast.With, ast.AsyncWith)):
            out.extend(("unknown", i.optional_vars, None) for i in n.items if i.optional_vars is not None)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            out.append(("unknown", ast.Name(id=n.name), None))
        elif f is not None and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = n.args
            for p in a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x]:
                out.append(("unknown", ast.Name(id=p.arg), None))
            if not isinstance(n, ast.Lambda):
                out.append(("kernel" if program.is_kernel(n) else "unknown", ast.Name(id=n.name), None))
        elif f is not None and isinstance(n, ast.ClassDef):
            out.append(("unknown", ast.Name(id=n.name), None))
    return out


def _bind(target, kind, new: dict, sink=None):
    if isinstance(target, ast.Name):
        new[target.id] = join(new.get(target.id, BOT), kind)
    elif isinstance(target, (ast.Tuple, ast.List)):
        elts = target.elts
        starred = any(isinstance(e, ast.Starred) for e in elts)
        if (isinstance(kind, tuple) and kind[0] == "tuple" and not starred
                and len(kind[1]) == len(elts)):
            for e, k in zip(elts, kind[1]):
                _bind(e, k, new, sink)
            return
        ek = elem(kind)
        for e in elts:
            if isinstance(e, ast.Starred):
                _bind(e.value, S if ek == S else U, new, sink)
            else:
                _bind(e, ek, new, sink)
    elif isinstance(target, ast.Starred):
        _bind(target.value, U, new, sink)
    elif sink is not None and isinstance(target, ast.Attribute):
        sink(target, kind)


def _iter_kind(inf: Inference, target, it, ctx, new, sink=None):
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and inf.program.is_builtin(it.func.id, ctx):
        name = it.func.id
        if name == "range":
            _bind(target, S, new, sink)
            return
        if name == "enumerate" and it.args and isinstance(target, ast.Tuple) and len(target.elts) == 2:
            _bind(target.elts[0], S, new, sink)
            _iter_kind(inf, target.elts[1], it.args[0], ctx, new, sink)
            return
        if (name == "zip" and isinstance(target, ast.Tuple) and len(target.elts) == len(it.args)
                and not any(isinstance(a, ast.Starred) for a in it.args)):
            for t, a in zip(target.elts, it.args):
                _iter_kind(inf, t, a, ctx, new, sink)
            return
    _bind(target, elem(inf.eval(it, ctx)), new, sink)


def _init_env(program: Program, f: Func) -> dict:
    env = {}
    a = f.node.args
    positional = a.posonlyargs + a.args
    defaults = {}
    if a.defaults:
        for p, d in zip(positional[-len(a.defaults):], a.defaults):
            defaults[p.arg] = d
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        if d is not None:
            defaults[p.arg] = d
    for i, p in enumerate(positional + a.kwonlyargs):
        if i == 0 and positional and f.cls is not None and not f.static:
            env[p.arg] = ("cls", f.cls) if f.classmeth else ("self", f.cls)
            continue
        k = _annotation_kind(program, p.annotation)
        if k is None:
            d = defaults.get(p.arg)
            if f.entry:
                if d is None:
                    k = T
                elif isinstance(d, ast.Constant) and d.value is not None:
                    k = S
                else:
                    k = U
            else:
                k = f.params.get(p.arg, BOT)
        env[p.arg] = k
    if a.vararg:
        env[a.vararg.arg] = U
    if a.kwarg:
        env[a.kwarg.arg] = U
    return env


def _annotation_kind(program: Program, ann):
    if ann is None:
        return None
    qn = program.qualname(ann, None)
    if qn in ("torch.Tensor", "torch.nn.Parameter") or (isinstance(ann, ast.Name) and ann.id == "Tensor"):
        return T
    if isinstance(ann, ast.Name) and ann.id in ("int", "float", "bool", "str") and program.is_builtin(ann.id, None):
        return S
    return None


def _solve_env(inf: Inference, f: Func | None, bindings: list) -> dict:
    """The environment of f (of the module when f is None) given the kinds the rest of the file has now."""
    program = inf.program
    base = {} if f is None else _init_env(program, f)
    env = dict(base)
    for b in bindings:
        if isinstance(b[1], ast.Name):
            env.setdefault(b[1].id, BOT)
        else:
            for t in flatten_targets([b[1]]):
                if isinstance(t, ast.Name):
                    env.setdefault(t.id, BOT)
    for _ in range(10):
        if f is None:
            program.module_env = env
        ctx = Ctx(env, f)
        new = dict(base)
        for kind, target, value in bindings:
            if kind == "assign":
                _bind(target, inf.eval(value, ctx), new)
            elif kind == "aug":
                old = env.get(target.id, BOT)
                _bind(target, binop(old, inf.eval(value.value, ctx)), new)
            elif kind == "iter":
                _iter_kind(inf, target, value, ctx, new)
            elif kind == "kernel":
                _bind(target, ("kernel", target.id), new)
            else:
                _bind(target, U, new)
        for name in env:
            new.setdefault(name, BOT)
        if new == env:
            break
        env = new
    if f is None:
        program.module_env = env
    return env


def _signature(inf: Inference):
    program = inf.program
    return repr((sorted(program.module_env.items(), key=str),
                 [(sorted(f.env.items(), key=str), f.ret, sorted(f.params.items(), key=str))
                  for f in program.funcs.values()],
                 sorted((c, sorted(a.items(), key=str)) for c, a in inf.class_attrs.items()),
                 sorted((c, sorted(a.items())) for c, a in inf.containers.items())))


def _collect_class_attrs(inf: Inference):
    program = inf.program
    attrs: dict[str, dict[str, object]] = {}
    containers: dict[str, dict[str, str]] = {}
    for cname, cdef in program.classes.items():
        ca = attrs.setdefault(cname, {})
        mctx = inf.ctx(None)
        for s in module_level(cdef.body):
            if isinstance(s, ast.Assign):
                for t in s.targets:
                    tmp: dict = {}
                    _bind(t, inf.eval(s.value, mctx), tmp)
                    for k, v in tmp.items():
                        ca[k] = join(ca.get(k, BOT), v)
        for f in program.methods.get(cname, {}).values():
            if f.kernel or f.self_name is None or f.classmeth:
                continue
            ctx = inf.ctx(f)
            sname = f.self_name

            def sink(target, kind, ca=ca, sname=sname):
                if isinstance(target.value, ast.Name) and target.value.id == sname:
                    ca[target.attr] = join(ca.get(target.attr, BOT), kind)

            for n in program.scope_nodes(f.node):
                if isinstance(n, ast.Assign):
                    for t in n.targets:
                        _bind(t, inf.eval(n.value, ctx), {}, sink)
                elif isinstance(n, ast.AnnAssign) and n.value is not None:
                    _bind(n.target, inf.eval(n.value, ctx), {}, sink)
                elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Attribute):
                    k = binop(inf.eval(n.target, ctx), inf.eval(n.value, ctx))
                    _bind(n.target, k, {}, sink)
                elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
                    recv = n.func.value
                    meth = n.func.attr
                    if isinstance(recv, ast.Name) and recv.id == sname and n.args:
                        name = str_const(n.args[0])
                        if name and meth in ("register_buffer", "register_parameter") and len(n.args) > 1:
                            v = n.args[1]
                            k = S if isinstance(v, ast.Constant) and v.value is None else T
                            ca[name] = join(ca.get(name, BOT), k)
                        elif name and meth == "add_module" and len(n.args) > 1:
                            ca[name] = join(ca.get(name, BOT), inf.eval(n.args[1], ctx))
                    elif (isinstance(recv, ast.Attribute) and isinstance(recv.value, ast.Name)
                          and recv.value.id == sname and meth in ("append", "extend", "insert", "add_module")
                          and n.args):
                        k = inf.eval(n.args[-1], ctx)
                        if meth == "extend":
                            k = elem(k)
                        if isinstance(k, tuple) and k[0] == "nn":
                            containers.setdefault(cname, {})[recv.attr] = k[1]
                elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "setattr"
                      and len(n.args) == 3 and isinstance(n.args[0], ast.Name) and n.args[0].id == sname
                      and str_const(n.args[1])):
                    name = n.args[1].value
                    ca[name] = join(ca.get(name, BOT), inf.eval(n.args[2], ctx))
    inf.class_attrs = attrs
    inf.containers = containers


def _collect_returns(inf: Inference):
    program = inf.program
    for f in program.funcs.values():
        if f.kernel:
            continue
        ctx = inf.ctx(f)
        ret, has_return = BOT, False
        for n in own_nodes(f.node):
            if isinstance(n, (ast.Yield, ast.YieldFrom)):
                ret, has_return = U, True
                break
            if isinstance(n, ast.Return):
                has_return = True
                ret = join(ret, S if n.value is None else inf.eval(n.value, ctx))
        f.ret = ret if has_return else S


def _collect_params(inf: Inference):
    program = inf.program
    params: dict[Func, dict] = {f: {} for f in program.funcs.values()}
    scopes = [(None, program.module_nodes())] + [
        (f, program.scope_nodes(f.node)) for f in program.funcs.values() if not f.kernel]
    for f, nodes in scopes:
        ctx = inf.ctx(f)
        for n in nodes:
            if not isinstance(n, ast.Call):
                continue
            for g, drop in inf.call_targets(n, ctx):
                _record_args(inf, g, drop, n, ctx, params[g])
    for f, p in params.items():
        f.params = p


def _record_args(inf: Inference, g: Func, drop: bool, call: ast.Call, ctx: Ctx, out: dict):
    a = g.node.args
    positional = [p.arg for p in a.posonlyargs + a.args]
    if drop:
        positional = positional[1:]
    passed = set()
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            for p in positional[i:]:
                out[p] = join(out.get(p, BOT), U)
                passed.add(p)
            break
        if i < len(positional):
            out[positional[i]] = join(out.get(positional[i], BOT), inf.eval(arg, ctx))
            passed.add(positional[i])
    names = set(positional) | {p.arg for p in a.kwonlyargs}
    for kw in call.keywords:
        if kw.arg is None:
            for p in names - passed:
                out[p] = join(out.get(p, BOT), U)
                passed.add(p)
        elif kw.arg in names:
            out[kw.arg] = join(out.get(kw.arg, BOT), inf.eval(kw.value, ctx))
            passed.add(kw.arg)
    all_pos = a.posonlyargs + a.args
    defaults = dict(zip([p.arg for p in all_pos[-len(a.defaults):]], a.defaults)) if a.defaults else {}
    defaults.update({p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None})
    mctx = inf.ctx(None)
    for p in names - passed:
        if p in defaults:
            out[p] = join(out.get(p, BOT), inf.eval(defaults[p], mctx))

