"""Kinds: what the inference knows about a value, and how kinds combine."""

from __future__ import annotations

BOT = "bot"  # nothing known yet (fixed-point start)
T = "tensor"
S = "scalar"  # clearly not a tensor: numbers, strings, None, shapes, dtypes, streams ...
U = "unknown"
# tuples: ("tuple", kinds) a tuple/list literal; ("nn", Layer) an nn module whose call computes;
# ("nnlist", Layer) a container of such; ("self"|"inst"|"cls"|"super", Class); ("func", key);
# ("method", Class, name, bound); ("apply", Class); ("alias", qualname) an imported name;
# ("kernel", name); ("ext",) a load_inline extension; ("extfn",) one of its functions; ("builtin", name)


def join(a, b):
    if a == BOT:
        return b
    if b == BOT:
        return a
    if a == b:
        return a
    if (isinstance(a, tuple) and isinstance(b, tuple) and a[0] == b[0] == "tuple"
            and len(a[1]) == len(b[1])):
        return ("tuple", tuple(join(x, y) for x, y in zip(a[1], b[1])))
    return U


def nontensor(k) -> bool:
    return k == S or isinstance(k, tuple)


def elem(k):
    """Kind of the elements got by unpacking, iterating or indexing a value of kind k."""
    if k in (T, S, BOT):
        return k
    if isinstance(k, tuple):
        if k[0] == "tuple":
            out = BOT
            for e in k[1]:
                out = join(out, e)
            return U if out == BOT else out
        if k[0] == "nnlist":
            return ("nn", k[1])
        if k[0] == "nn" and k[1] == "Sequential":
            return ("nn", "Sequential")
    return U


def binop(a, b):
    """Kind of an arithmetic result (binary operator, augmented assignment) of operands of kinds a and b."""
    if a == T or b == T:
        return T
    if nontensor(a) and nontensor(b):
        return S
    if BOT in (a, b):
        return BOT
    return U
