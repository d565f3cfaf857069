"""The pointwise math: each pointwise op of the IR as a Triton expression on fp32 values.

Values inside kernels are fp32 (floats are upcast at load), integers and booleans keep their type. Functions
the Triton interpreter lacks (libdevice tanh, ...) are written with `tl` primitives, in small `@triton.jit`
helpers that are emitted into the candidate only when used (`HELPERS`).
"""

from __future__ import annotations

import math

import torch

TL_DTYPES = {
    torch.float32: "tl.float32", torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16",
    torch.float64: "tl.float64",
    torch.int64: "tl.int64", torch.int32: "tl.int32", torch.int16: "tl.int16", torch.int8: "tl.int8",
    torch.uint8: "tl.uint8", torch.bool: "tl.int1",
}

HELPERS = {
    "_whole_fours": '''def _whole_fours(*sizes):
    """4 where every size divides by 4 (the kernel then reads 16 bytes at a time), else 1."""
    return 4 if all(size % 4 == 0 for size in sizes) else 1
''',
    "_programs_resident": '''_RESIDENT = {}


def _programs_resident(t):
    """A persistent kernel's programs: one per streaming multiprocessor of t's GPU (4 on the CPU, so that the
    interpreter's programs each take several tiles)."""
    if not t.is_cuda:
        return 4
    index = t.device.index if t.device.index is not None else torch.cuda.current_device()
    if index not in _RESIDENT:
        _RESIDENT[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _RESIDENT[index]
''',
    "_tma_scratch": '''def _tma_scratch(size, alignment, stream):
    """Global memory for the kernels' tensor descriptors, which Triton asks for at a launch."""
    return torch.empty(size, device="cuda", dtype=torch.int8)
''',
    "_tanh": '''@triton.jit
def _tanh(x):
    # tanh through the sigmoid: the interpreter has no libdevice tanh
    return 2.0 * tl.sigmoid(2.0 * x) - 1.0
''',
    "_softplus": '''@triton.jit
def _softplus(x, beta, threshold):
    # PyTorch's softplus: linear above the threshold
    z = x * beta
    return tl.where(z > threshold, x, tl.log(1.0 + tl.exp(tl.minimum(z, threshold))) / beta)
''',
    "_round_half_even": '''@triton.jit
def _round_half_even(x):
    r = tl.floor(x + 0.5)
    tie = (r - x) == 0.5
    return tl.where(tie & ((r - 2.0 * tl.floor(r * 0.5)) != 0.0), r - 1.0, r)
''',
    "_trunc": '''@triton.jit
def _trunc(x):
    return tl.where(x >= 0, tl.floor(x), tl.ceil(x))
''',
    "_channels_last": '''@triton.jit
def _channels_last_kernel(src, dst, stats, C, S, size1, size2, stride_n, stride_c, stride_s0, stride_s1, stride_s2,
                          FLAT: tl.constexpr, ROUND_TF32: tl.constexpr, MODE: tl.constexpr, BS: tl.constexpr,
                          BC: tl.constexpr):
    # dst[n, s, c] = src[n, c, s], s the flattened position over up to three spatial dims.
    # MODE 0: the copy; 1: only the largest magnitude, into stats[0]; 2: the copy times stats[1] = 2**(14 - e),
    # amax <= 2**e (a power of two: exact), so that fp16 holds every value at TF32's precision;
    # 3: the copy at scale 1 (stats[1] = 1) and its largest magnitude into stats[0], then 4: mode 2 where
    # scale 1 does not fit that magnitude (1 <= amax < 2**15 fits: no value overflows, and only those under
    # 2**-14 of amax's size lose bits), else nothing: one pass over the tensor instead of two
    copy = True
    if MODE == 2 or MODE == 4:
        amax = tl.load(stats)
        finite = (amax > 0) & (amax < float("inf"))
        scale = tl.where(finite, tl.exp2(14.0 - tl.ceil(tl.log2(amax))), 1.0)
        if MODE == 4:  # a program does nothing more where the copy of mode 3 (scale 1) stands
            copy = finite & ((amax < 1.0) | (amax >= 32768.0))
    if copy:
        n = tl.program_id(2).to(tl.int64)
        rs = tl.program_id(0) * BS + tl.arange(0, BS)
        rc = tl.program_id(1) * BC + tl.arange(0, BC)
        if FLAT:  # the spatial dims lie flat in memory: consecutive positions are stride_s2 apart
            pos = rs * stride_s2
        else:
            pos = (rs // (size1 * size2)) * stride_s0 + ((rs // size2) % size1) * stride_s1 + (rs % size2) * stride_s2
        mask = (rs < S)[:, None] & (rc < C)[None, :]
        first = (tl.program_id(0) == 0) & (tl.program_id(1) == 0) & (tl.program_id(2) == 0)
        v = tl.load(src + n * stride_n + pos[:, None] + rc[None, :] * stride_c, mask=mask)
        if MODE == 1 or MODE == 3:
            tl.atomic_max(stats, tl.max(tl.max(tl.where(mask, tl.abs(v), 0.0), axis=1), axis=0))
        if MODE != 1:
            if ROUND_TF32:  # to the nearest TF32 value (ties away from zero), as cuDNN does; the tensor cores truncate
                bits = (v.to(tl.uint32, bitcast=True) + 0x1000) & 0xFFFFE000
                v = tl.where(v == v, bits.to(tl.float32, bitcast=True), v)
            if MODE == 2 or MODE == 4:
                v = v * scale
                if first:
                    tl.store(stats + 1, scale)
            if MODE == 3:
                if first:
                    tl.store(stats + 1, 1.0)
            tl.store(dst + n * S * C + rs[:, None] * C + rc[None, :], v, mask=mask)


def _channels_last_launch(t, out, stats, mode, tf32):
    spatial = list(t.shape[2:])
    sizes = [1] * (3 - len(spatial)) + spatial
    strides = [0] * (3 - len(spatial)) + [t.stride(2 + d) for d in range(len(spatial))]
    inner = strides[2]
    flat = all(sizes[d] == 1 or strides[d] == inner * sizes[d + 1] * (sizes[d + 2] if d == 0 else 1)
               for d in range(2))
    total = sizes[0] * sizes[1] * sizes[2]
    # fp16 copies: 64 channels a program where there are as many, else 128 positions of 32 (measured on an
    # H200: 12-23% faster than 64 x 32)
    bs, bc = (64, 32) if mode == 0 else (64, 64) if t.shape[1] >= 64 else (128, 32)
    grid = (triton.cdiv(total, bs), triton.cdiv(t.shape[1], bc), t.shape[0])
    _channels_last_kernel[grid](t, out, stats, t.shape[1], total, sizes[1], sizes[2], t.stride(0), t.stride(1),
                                strides[0], strides[1], strides[2], FLAT=flat,
                                ROUND_TF32=bool(tf32 and t.is_cuda and t.dtype == torch.float32), MODE=mode,
                                BS=bs, BC=bc, num_warps=4)


def _channels_last(t, tf32=False):
    """A new contiguous (N, *spatial, C) copy of an (N, C, *spatial) tensor (up to three spatial dims); with
    tf32, fp32 values on a GPU are rounded to TF32 on the way (a TF32 dot then computes what cuDNN's does)."""
    out = torch.empty((t.shape[0], *t.shape[2:], t.shape[1]), device=t.device, dtype=t.dtype)
    _channels_last_launch(t, out, out, 0, tf32)
    return out


def _channels_last_half(t):
    """The channels-last copy of an fp32 tensor on a GPU in fp16, its values rounded to TF32 and scaled by a power
    of two (so none overflows, and fp16's 10-bit mantissa holds them exactly): the tensor cores' fp16 rate with
    TF32's rounding. Returns (copy, stats): stats[1] is the scale, which the dot's result is divided by. One pass
    at scale 1 where the largest magnitude lies in [1, 2**15) (the second launch then only reads stats), else a
    second one at the scale that fits. Elsewhere (another dtype, or the CPU) the plain copy, with scale 1."""
    if not (t.is_cuda and t.dtype == torch.float32):
        return _channels_last(t), torch.tensor([0.0, 1.0], device=t.device)
    stats = torch.zeros(2, device=t.device, dtype=torch.float32)
    out = torch.empty((t.shape[0], *t.shape[2:], t.shape[1]), device=t.device, dtype=torch.float16)
    _channels_last_launch(t, out, stats, 3, True)
    _channels_last_launch(t, out, stats, 4, True)
    return out, stats
''',
    "_split_fp16x3": '''@triton.jit
def _split_fp16x3_kernel(src, hi, lo, inv, R, K, stride_b, stride_r, stride_k, BR: tl.constexpr, BK: tl.constexpr):
    # each row r of batch b: hi + lo / 2**11 = src[b, r, :] * 2**e, hi and lo fp16 (K contiguous), e per row so that
    # the row's largest magnitude lies under 2**14 (no overflow, and 22 significant bits: TF32x3's accuracy);
    # inv[b, r] = 2**-e. e comes from the exponent bits: a power of two, so every scaling is exact
    b = tl.program_id(1).to(tl.int64)
    rows = tl.program_id(0) * BR + tl.arange(0, BR)
    row_ok = rows < R
    base = src + b * stride_b + rows[:, None] * stride_r
    largest = tl.zeros([BR], dtype=tl.float32)
    for k0 in range(0, K, BK):
        cols = k0 + tl.arange(0, BK)
        ok = row_ok[:, None] & (cols[None, :] < K)
        v = tl.load(base + cols[None, :] * stride_k, mask=ok, other=0.0).to(tl.float32)
        largest = tl.maximum(largest, tl.max(tl.abs(v), axis=1))
    exponent = ((largest.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127  # largest < 2**(exponent + 1)
    e = tl.minimum(tl.maximum(13 - exponent, -126), 127)
    scale = ((e + 127) << 23).to(tl.float32, bitcast=True)
    tl.store(inv + b * R + rows, ((127 - e) << 23).to(tl.float32, bitcast=True), mask=row_ok)
    out = b * R * K + rows[:, None] * K
    for k0 in range(0, K, BK):
        cols = k0 + tl.arange(0, BK)
        ok = row_ok[:, None] & (cols[None, :] < K)
        v = tl.load(base + cols[None, :] * stride_k, mask=ok, other=0.0).to(tl.float32) * scale[:, None]
        high = v.to(tl.float16)
        tl.store(hi + out + cols[None, :], high, mask=ok)
        tl.store(lo + out + cols[None, :], ((v - high.to(tl.float32)) * 2048.0).to(tl.float16), mask=ok)


_SPLIT_TILES = {"k": (2, 1024), "other": (16, 128)}  # (rows, K) a program: K contiguous, or not


def _split_fp16x3(t, k_dim):
    """t, (R, K) or (B, R, K) with K along dim k_dim (-1, or -2 for (K, R) and (B, K, R)), as fp16 parts hi and lo
    of t's shape (K contiguous in memory) and fp32 row factors inv of t's shape without K, such that
    t = (hi + lo / 2**11) * inv to 22 significant bits: three fp16 products (hi hi, hi lo, lo hi) then give an fp32
    product at TF32x3's accuracy, at the tensor cores' fp16 rate."""
    batched = t if t.dim() == 3 else t.unsqueeze(0)
    k_axis = 2 if k_dim == -1 else 1
    r_axis = 3 - k_axis
    count, rows, depth = batched.shape[0], batched.shape[r_axis], batched.shape[k_axis]
    hi = torch.empty((count, rows, depth), device=t.device, dtype=torch.float16)
    lo = torch.empty_like(hi)
    inv = torch.empty((count, rows), device=t.device, dtype=torch.float32)
    # K contiguous: two rows a program (many programs, and a row read twice is in L2 the second time); else 16
    # rows of 128 (measured on an H200: 0.030 ms against 0.117 for 1024 x 8192 with K contiguous; 0.021 against
    # 0.050 for a 1024 x 4096 K x N operand with 64 rows of 32)
    br, bk = _SPLIT_TILES["k" if batched.stride(k_axis) == 1 else "other"]
    _split_fp16x3_kernel[(triton.cdiv(rows, br), count)](batched, hi, lo, inv, rows, depth, batched.stride(0),
                                                          batched.stride(r_axis), batched.stride(k_axis), BR=br,
                                                          BK=bk, num_warps=4)
    if k_axis == 1:
        hi, lo = hi.transpose(1, 2), lo.transpose(1, 2)
    return (hi, lo, inv) if t.dim() == 3 else (hi[0], lo[0], inv[0])
''',
    "_k_major": '''def _k_major(b):
    """b (K, N) or (B, K, N), or a view of a copy of it whose K dim is contiguous where it is not: the tensor
    cores' TF32 path takes B tiles that are contiguous along K only."""
    if b.stride(-2) == 1 or b.shape[-2] == 1:
        return b
    batched = b if b.dim() == 3 else b.unsqueeze(0)
    copy = _channels_last(batched).transpose(1, 2)  # (B, N, K) in memory, (B, K, N) as seen
    return copy if b.dim() == 3 else copy[0]
''',
}


def literal(value) -> str:
    """A Python scalar as Triton source."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    value = float(value)
    if math.isnan(value):
        return 'float("nan")'
    if math.isinf(value):
        return 'float("inf")' if value > 0 else '-float("inf")'
    return repr(value)


def _pow(a: str, b, b_is_scalar: bool, a_is_scalar: bool, used: set[str]) -> str:
    if a_is_scalar:
        base = float(a)
        return f"tl.exp2({b})" if base == 2 else f"tl.exp({b} * {literal(math.log(base))})" if base > 0 else \
            f"tl.exp({b} * tl.log({literal(base)} + 0.0 * {b}))"
    if not b_is_scalar:
        return f"tl.exp({b} * tl.log({a}))"
    e = float(b)
    fixed = {0.0: f"(0.0 * {a} + 1.0)", 1.0: a, 2.0: f"({a} * {a})", 3.0: f"({a} * {a} * {a})",
             4.0: f"(({a} * {a}) * ({a} * {a}))", 0.5: f"tl.sqrt({a})", -0.5: f"tl.rsqrt({a})", -1.0: f"(1.0 / {a})",
             -2.0: f"(1.0 / ({a} * {a}))"}
    if e in fixed:
        return fixed[e]
    if e.is_integer():
        magnitude = f"tl.exp({literal(e)} * tl.log(tl.abs({a})))"
        return f"tl.where({a} < 0, -{magnitude}, {magnitude})" if int(e) % 2 else magnitude
    return f"tl.exp({literal(e)} * tl.log({a}))"


def pointwise(name: str, args: list[str], attrs: dict, scalar: list[bool], used: set[str]) -> str:
    """The Triton expression of one pointwise op; `scalar[i]` tells whether args[i] is a Python constant;
    helper names it needs are added to `used`."""
    a = args[0] if args else ""
    b = args[1] if len(args) > 1 else ""
    if name == "identity":
        return a
    simple = {
        "neg": f"-{a}", "abs": f"tl.abs({a})", "relu": f"tl.maximum({a}, 0.0)",
        "relu6": f"tl.minimum(tl.maximum({a}, 0.0), 6.0)", "sigmoid": f"tl.sigmoid({a})", "exp": f"tl.exp({a})",
        "exp2": f"tl.exp2({a})", "log": f"tl.log({a})", "log2": f"tl.log2({a})",
        "log10": f"(tl.log({a}) * 0.4342944819032518)", "log1p": f"tl.log(1.0 + {a})", "expm1": f"(tl.exp({a}) - 1.0)",
        "sqrt": f"tl.sqrt({a})", "rsqrt": f"tl.rsqrt({a})", "reciprocal": f"(1.0 / {a})", "square": f"({a} * {a})",
        "sin": f"tl.sin({a})", "cos": f"tl.cos({a})", "erf": f"tl.erf({a})", "floor": f"tl.floor({a})",
        "ceil": f"tl.ceil({a})", "sign": f"tl.where({a} > 0, 1.0, tl.where({a} < 0, -1.0, 0.0))",
        "silu": f"({a} * tl.sigmoid({a}))", "softsign": f"({a} / (1.0 + tl.abs({a})))",
        "selu": f"(1.0507009873554805 * tl.where({a} > 0, {a}, 1.6732632423543772 * (tl.exp({a}) - 1.0)))",
        "hardswish": f"({a} * tl.minimum(tl.maximum({a} + 3.0, 0.0), 6.0) / 6.0)",
        "hardsigmoid": f"(tl.minimum(tl.maximum({a} + 3.0, 0.0), 6.0) / 6.0)",
        "logsigmoid": f"(tl.minimum({a}, 0.0) - tl.log(1.0 + tl.exp(-tl.abs({a}))))",
        "logical_not": f"({a} == 0)",
        "add": f"({a} + {b})", "sub": f"({a} - {b})", "mul": f"({a} * {b})",
        "maximum": f"tl.maximum({a}, {b})", "minimum": f"tl.minimum({a}, {b})",
        "eq": f"({a} == {b})", "ne": f"({a} != {b})", "lt": f"({a} < {b})", "le": f"({a} <= {b})",
        "gt": f"({a} > {b})", "ge": f"({a} >= {b})",
        "logical_and": f"(({a} != 0) & ({b} != 0))", "logical_or": f"(({a} != 0) | ({b} != 0))",
        "remainder": f"({a} - {b} * tl.floor({a} / {b}))",
    }
    if name in simple:
        return simple[name]
    if name == "tanh":
        used.add("_tanh")
        return f"_tanh({a})"
    if name == "mish":
        used.update(("_tanh", "_softplus"))
        return f"({a} * _tanh(_softplus({a}, 1.0, 20.0)))"
    if name == "softplus":
        used.add("_softplus")
        return f"_softplus({a}, {literal(attrs['beta'])}, {literal(attrs['threshold'])})"
    if name == "round":
        used.add("_round_half_even")
        return f"_round_half_even({a})"
    if name == "trunc":
        used.add("_trunc")
        return f"_trunc({a})"
    if name == "fmod":
        used.add("_trunc")
        return f"({a} - {b} * _trunc({a} / {b}))"
    if name == "gelu":
        if attrs.get("approximate", "none") == "tanh":
            used.add("_tanh")
            return f"(0.5 * {a} * (1.0 + _tanh(0.7978845608028654 * ({a} + 0.044715 * {a} * {a} * {a}))))"
        return f"(0.5 * {a} * (1.0 + tl.erf({a} * 0.7071067811865476)))"
    if name == "leaky_relu":
        return f"tl.where({a} > 0, {a}, {a} * {literal(attrs['slope'])})"
    if name == "elu":
        alpha, scale, input_scale = attrs["alpha"], attrs.get("scale", 1.0), attrs.get("input_scale", 1.0)
        pos = a if scale == 1.0 else f"{a} * {literal(scale)}"
        inner = a if input_scale == 1.0 else f"{a} * {literal(input_scale)}"
        return f"tl.where({a} > 0, {pos}, {literal(alpha * scale)} * (tl.exp({inner}) - 1.0))"
    if name == "clamp":
        out = a
        if attrs.get("min") is not None:
            out = f"tl.maximum({out}, {literal(attrs['min'])})"
        if attrs.get("max") is not None:
            out = f"tl.minimum({out}, {literal(attrs['max'])})"
        return out
    if name == "threshold":
        return f"tl.where({a} > {literal(attrs['threshold'])}, {a}, {literal(attrs['value'])})"
    if name == "div":
        mode = attrs.get("rounding_mode")
        if mode == "floor":
            return f"tl.floor({a} / {b})"
        if mode == "trunc":
            used.add("_trunc")
            return f"_trunc({a} / {b})"
        return f"({a} / {b})"
    if name == "pow":
        return _pow(a, b, scalar[1], scalar[0], used)
    if name == "where":
        return f"tl.where({a}, {b}, {args[2]})"
    if name == "cast":
        dtype = attrs["dtype"]
        if dtype == torch.bool:
            return f"({a} != 0)"
        if dtype.is_floating_point:
            if dtype in (torch.float16, torch.bfloat16):
                return f"{a}.to({TL_DTYPES[dtype]}).to(tl.float32)"  # round like the reference does
            return f"{a}.to(tl.float32)"
        return f"{a}.to({TL_DTYPES[dtype]})"
    raise KeyError(f"no Triton expression for {name}")
