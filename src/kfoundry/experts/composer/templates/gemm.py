"""The GEMM template: Linear / matmul / bmm (with batch broadcasting) as a tiled `tl.dot` loop, with the
pointwise ops after it (bias, activations, scaling, clamps, residual adds, casts) generated into its epilogue.

Tiles are visited in groups of GROUP_M rows so that neighbouring programs share operand tiles in L2. For a
Linear on a (..., K) input the leading dims are flattened into M, so one launch covers the whole batch.
fp32 inputs never use a single TF32 product by default: PyTorch does not use TF32 for fp32 matmuls, and the fp32
tolerance rejects it. They lead with fp16x3 (each operand split into two fp16 parts, three fp16 products: TF32x3's
accuracy at the fp16 rate), then TF32x3, then IEEE.
"""

from __future__ import annotations

import math

from kfoundry.experts.composer.emit.host import HostContext, product
from kfoundry.experts.composer.emit.kernel import (
    Access,
    Emitter,
    KernelCode,
    KernelWriter,
    Space,
    accesses_of,
    allocate,
    merge_dims,
    space_sizes,
    unravel,
    wrap_call,
)
from kfoundry.experts.composer.ir.graph import Value, category
from kfoundry.experts.composer.plan.steps import Group, kernel_name
from kfoundry.experts.composer.templates.device_limits import DeviceLimits, composer_dot_need, fit_configs
from kfoundry.problem import TF32_MIN_TOLERANCE
from kfoundry.types import DeviceFacts

BASE_CONFIGS = [
    {"BM": 64, "BN": 64, "BK": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 3},
    {"BM": 128, "BN": 128, "BK": 32, "GROUP_M": 8, "num_warps": 8, "num_stages": 3},
    {"BM": 128, "BN": 64, "BK": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 4},
    {"BM": 64, "BN": 128, "BK": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 3},
    {"BM": 32, "BN": 64, "BK": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 4},
]


def dot_precisions(precision: str, tolerance: float | None, tf32_fair: bool = False) -> list[str]:
    """fp32 dot precisions to try, the first for the first variant (after SPLIT_CONFIGS where a GEMM takes
    them). TF32x3 first: three TF32 products on the tensor cores, close to fp32 accuracy, where IEEE dots run
    on the FMA units at about half of cuBLAS's fp32 speed (0.44x eager seen on the H200 for an 8192x4096x4096
    Linear). IEEE stays as a variant; plain TF32 only where the reference itself runs TF32 (cuDNN
    convolutions) or the user's tolerance admits its error."""
    if precision != "fp32":
        return ["default"]
    out = ["tf32x3"]
    if tf32_fair or (tolerance is not None and tolerance >= TF32_MIN_TOLERANCE):
        out.append("tf32")
    out.append("ieee")
    return out


TENSOR_CORE_FP32 = ("tf32", "tf32x3")
# fp32 operands split into fp16 parts hi + lo / 2**11 per row (the `_split_fp16x3` helper), three fp16 products
SPLIT = "fp16x3"
SPLIT_CHUNK = 8  # k-steps whose high products share an accumulator (benchmarks/gemm_precisions.py: chunks of 8)
# fp32 operands copied to fp16 after rounding to TF32 and scaling by a power of two (the convolution's copies): TF32's
# arithmetic at the tensor cores' fp16 rate, with half the bytes; the dot runs at its default precision
HALF = "fp16"

# a reduction over the output features in the epilogue: one tile spans all of them (BN chosen on the host)
TILE_REDUCTION_CONFIGS = [
    {"BM": 32, "BN": "full", "BK": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 3},
    {"BM": 64, "BN": "full", "BK": 32, "GROUP_M": 8, "num_warps": 8, "num_stages": 3},
    {"BM": 16, "BN": "full", "BK": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 4},
    {"BM": 64, "BN": "full", "BK": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 2},
]


# fp32 GEMMs the split helper takes lead with fp16x3 in the tiles that led on the H200, then TF32x3's best tile
# there, then BASE_CONFIGS (benchmarks/gemm_precisions.py, a 1024x8192x8192 Linear: fp16x3 1.04 ms with chunks of
# 8 at 0.01 of the fp32 tolerance, 1.10 ms in 128x128x32 without chunks; TF32x3 1.56 ms, and 1.88 ms in
# BASE_CONFIGS' 128x128x32)
SPLIT_CONFIGS = [
    {"BM": 128, "BN": 128, "BK": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3, "precision": SPLIT},
    {"BM": 128, "BN": 128, "BK": 32, "GROUP_M": 8, "num_warps": 8, "num_stages": 4, "precision": SPLIT},
    {"BM": 128, "BN": 128, "BK": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3, "precision": "tf32x3"},
]


# a persistent kernel (one program per multiprocessor, looping over tiles): the lead tile, for the search (at fp16x3
# among SPLIT_SEARCH_CONFIGS, else at the first precision); not where one tile spans the features (a reduction over
# them in the epilogue)
PERSISTENT_CONFIG = {"BM": 128, "BN": 128, "BK": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3,
                     "persistent": True}
# more fp16x3 tiles for the search (the genome's tile moves), after every tile the composer leads with: without them
# the fastest precision of an fp32 GEMM had two tiles of one shape (gemm_suite's searches of 2026-12-05 gained under
# 5% over generation 0 on 6 of 8 problems). Narrower tiles for the three accumulators' registers (acc, the
# chunk's high products, the low products), a wide one, and wider tile groups for L2 reuse along N
SPLIT_SEARCH_CONFIGS = [
    {"BM": 64, "BN": 128, "BK": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 4, "precision": SPLIT},
    {"BM": 128, "BN": 64, "BK": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 4, "precision": SPLIT},
    {"BM": 64, "BN": 256, "BK": 32, "GROUP_M": 8, "num_warps": 8, "num_stages": 4, "precision": SPLIT},
    {"BM": 128, "BN": 128, "BK": 64, "GROUP_M": 16, "num_warps": 8, "num_stages": 3, "precision": SPLIT},
    {"BM": 64, "BN": 64, "BK": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 5, "precision": SPLIT},
    dict(PERSISTENT_CONFIG, precision=SPLIT),
]
# the lead fp16x3 tile (at two pipeline depths) and the persistent kernel with their operand tiles read through
# tensor descriptors (Hopper's copy engine: no address arithmetic or masks in the loop), for the search, where A and
# B are matrices (no batch dim: a descriptor's base would move with it)
TMA_CONFIGS = [
    dict(SPLIT_CONFIGS[0], tma=True),
    dict(SPLIT_CONFIGS[1], tma=True),
    dict(PERSISTENT_CONFIG, precision=SPLIT, tma=True),
]


# split-K (the reduction over K shared by SPLIT_K programs a tile, their partial sums added by a second launch of the
# same kernel before the epilogue): offered where the output has too few tiles to fill the GPU and K is long, at the
# first precision; the first of them joins the first population where the lead tile fills under a quarter of it
SPLIT_K_CONFIGS = [
    {"BM": 64, "BN": 64, "BK": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 4, "SPLIT_K": 4},
    {"BM": 64, "BN": 64, "BK": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 4, "SPLIT_K": 8},
    {"BM": 64, "BN": 128, "BK": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 3, "SPLIT_K": 4},
    {"BM": 128, "BN": 128, "BK": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3, "SPLIT_K": 8},
    {"BM": 32, "BN": 64, "BK": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 4, "SPLIT_K": 16},
]
SPLIT_K_MIN_STEPS = 32  # K of at least this many 64-wide steps: each of 8 programs still runs 4 of them
TYPICAL_SMS = 132  # the typical target's multiprocessors (an H100 SXM; an H200 has as many) where none is known


def split_k_fill(group: Group, sms: int) -> float | None:
    """The share of the GPU's multiprocessors the lead 128 x 128 tile's programs fill, where split-K is worth
    offering (a long K, an output of few tiles); else None."""
    out, a = group.anchor.out, group.anchor.args[0]
    k = int(a.shape[-1])
    if group.reduced or out.rank < 2 or k < SPLIT_K_MIN_STEPS * 64:
        return None
    if flattens_rows(group):
        m, batch = math.prod(int(d) for d in out.shape[:-1]), 1
    else:
        m, batch = int(out.shape[-2]), math.prod(int(d) for d in out.shape[:-2])
    programs = math.ceil(m / 128) * math.ceil(int(out.shape[-1]) / 128) * batch
    return programs / sms if programs < sms else None


def flattens_rows(group: Group) -> bool:
    """A Linear on (..., K) (B a matrix, A of more dims): its leading dims flattened into M, one launch for them."""
    a, b = group.anchor.args
    return b.rank == 2 and a.rank > 2


def unbatched(group: Group) -> bool:
    """A Linear's rows (every leading dim flattened into M) or a product of matrices: no batch dim."""
    return flattens_rows(group) or all(int(d) == 1 for d in group.anchor.out.shape[:-2])


def splittable(group: Group) -> bool:
    """Operands the split helper takes (2 or 3 dims as the kernel reads them), and no reduction over the output
    features (its one tile spanning them all holds one accumulator, not two)."""
    a, b = group.anchor.args
    return not group.reduced and a.rank >= 2 and b.rank >= 2 and (b.rank == 2 or group.anchor.out.rank <= 3)


def operand_bytes(values: list[Value], precision: str) -> int:
    """The widest element of a dot's operands: a dtype the program fixed, else the evaluation's precision's."""
    widths = [v.dtype.itemsize if v.fixed_dtype and v.dtype is not None else 4 if precision == "fp32" else 2
              for v in values]
    return max(widths, default=4)


def configs(group: Group, precision: str = "fp32", tolerance: float | None = None,
            device: DeviceFacts | DeviceLimits | None = None) -> list[dict]:
    """The tile configurations, each fitted to `device`'s shared memory, registers and threads (device_limits:
    fewer stages, then smaller tiles; dropped where none fits). None: the default target
    (device_limits.DEFAULT_LIMITS)."""
    n, width = int(group.anchor.out.shape[-1]), operand_bytes(list(group.anchor.args), precision)
    gpu = device if isinstance(device, DeviceFacts) and device.kind != "cpu" else None
    sms = (gpu.sm_count if gpu else None) or TYPICAL_SMS
    # tensor descriptors where the target has the copy engine (Hopper on): a GPU known to be older is not offered them
    copy_engine = not (gpu and gpu.compute_capability and float(gpu.compute_capability) < 9.0)
    return fit_configs(_configs(group, precision, tolerance, split_k_fill(group, sms), copy_engine),
                       lambda c: composer_dot_need(c, n_full=n, element_bytes=width), device)


def _configs(group: Group, precision: str, tolerance: float | None, fill: float | None = None,
             copy_engine: bool = True) -> list[dict]:
    precisions = dot_precisions(precision, tolerance)
    split = precision == "fp32" and splittable(group)
    out = [dict(c) for c in SPLIT_CONFIGS] if split else []
    lead = SPLIT if split else precisions[0]
    split_k = [dict(c, precision=lead) for c in SPLIT_K_CONFIGS] if fill is not None else []
    if fill is not None and fill < 0.25:
        out.insert(1, split_k.pop(0))
    for i, base in enumerate(TILE_REDUCTION_CONFIGS if group.reduced else BASE_CONFIGS):
        # two of every three tile shapes take the first (fastest accurate) precision, the third the others in turn
        pick = precisions[(i // 3) % (len(precisions) - 1) + 1] if i % 3 == 2 and len(precisions) > 1 else precisions[0]
        out.append(dict(base, precision=pick))
    if split:
        out += [dict(c) for c in SPLIT_SEARCH_CONFIGS]
        # a batched product's descriptors are made per program, after its batch: not in the persistent loop
        out += [dict(c) for c in TMA_CONFIGS if unbatched(group) or not c.get("persistent")] if copy_engine else []
    elif not group.reduced:
        out.append(dict(PERSISTENT_CONFIG, precision=precisions[0]))
    return out + split_k


def dot_step(kw: KernelWriter, config: dict, a: Value, b: Value) -> None:
    """acc += a_tile @ b_tile, the tiles loaded as `a` and `b` (both made fp32 where their dtypes differ)."""
    if a.dtype != b.dtype or a.fixed_dtype != b.fixed_dtype:
        kw.line("a, b = a.to(tl.float32), b.to(tl.float32)")
    if config.get("precision", "ieee") in ("default", HALF):
        kw.line("acc = tl.dot(a, b, acc)")
    else:
        kw.line("acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)")


def dot_precision_host(config: dict, tensor: str) -> str:
    """The precision passed from the host: the configured one for fp32 tensors, Triton's default otherwise."""
    if config["precision"] == "tf32":
        return '"tf32"'
    return f'"{config["precision"]}" if {tensor}.dtype == torch.float32 else "tf32"'


def grouped_tiles(kw: KernelWriter, m_total: str, n_total: str, pid: str = "tl.program_id(0)") -> None:
    kw.line(f"pid = {pid}")
    kw.line(f"num_m = tl.cdiv({m_total}, BM)")
    kw.line(f"num_n = tl.cdiv({n_total}, BN)")
    kw.line("tiles_in_group = GROUP_M * num_n")
    kw.line("first_m = (pid // tiles_in_group) * GROUP_M")
    kw.line("rows_in_group = tl.minimum(num_m - first_m, GROUP_M)")
    kw.line("pid_m = first_m + (pid % tiles_in_group) % rows_in_group")
    kw.line("pid_n = (pid % tiles_in_group) // rows_in_group")
    kw.line("rm = pid_m * BM + tl.arange(0, BM)")
    kw.line("rn = pid_n * BN + tl.arange(0, BN)")
    kw.line("rk = tl.arange(0, BK)")


def tile_constexprs(kw: KernelWriter, config: dict, tensor: str, n_host: str) -> None:
    for key in ("BM", "BN", "BK", "GROUP_M"):
        value = str(config[key])
        if key == "BN" and config[key] == "full":  # one tile spans every column (an epilogue reduction)
            value = f"max(16, triton.next_power_of_2({n_host}))"
        kw.constexpr(key, value)
    if config.get("precision", "ieee") not in ("default", HALF, SPLIT):
        kw.constexpr("DOT_PRECISION", dot_precision_host(config, tensor))


TILE_ZEROS = {"m": "rm[:, None] * 0", "n": "rn[None, :] * 0"}
TILE_MASKS = {"m": "m_ok", "n": "n_ok"}


def tile_grid(m_total: str, n_total: str, config: dict) -> str:
    """The number of tiles, from the launch's own BM / BN (the grid is a function of the launch's constants: a
    tile size is written once, where the tuner changes it, and 128 x 128 tiles are not two equal numbers in the
    grid that it could not tell apart)."""
    if config["BN"] == "full":
        return f'triton.cdiv({m_total}, META["BM"])'
    return f'triton.cdiv({m_total}, META["BM"]) * triton.cdiv({n_total}, META["BN"])'


def epilogue(emitter: Emitter, access: Access, group: Group, n_dim: int, n_count: str) -> None:
    """The fused ops on the accumulator tile, then the stores; reductions run along the tile's columns."""
    for fused in group.ops:
        if category(fused.name) == "reduction":
            emitter.reduce(fused, "n_ok", n_count, "n")
        else:
            emitter.pointwise(fused)
    for value in group.exports:
        runs_along_n = n_dim in group.vmap[value]
        emitter.store(value, group.vmap[value], extra_mask="m_ok & n_ok" if runs_along_n else "m_ok")


# where(col - row OP c, ...): the tile is dead (no element kept) when even its best corner fails the test
_DEAD_TILE = {
    "ge": "pid_n * BN + BN - 1 - pid_m * BM < {c}",
    "gt": "pid_n * BN + BN - 1 - pid_m * BM <= {c}",
    "le": "pid_n * BN - (pid_m * BM + BM - 1) > {c}",
    "lt": "pid_n * BN - (pid_m * BM + BM - 1) >= {c}",
}


def dead_tile(group: Group) -> str | None:
    """A triangle's mask in the epilogue (triu / tril of the product: where(col - row >= c, ..., other)) whose
    kept side alone reads the product: the condition under which a tile keeps nothing, so that it skips its
    products (half of them for a triangle). None where the epilogue has no such mask."""
    out, rank = group.anchor.out, len(group.space)
    a, b = group.anchor.args
    if group.reduced or out.rank < 2 or (b.rank == 2 and a.rank > 2):  # rows flattened over several dims
        return None
    for where in group.ops:
        if where.name != "where" or not isinstance(where.args[0], Value):
            continue
        test = where.args[0].producer
        if test is None or test.name not in _DEAD_TILE or test not in group.ops or not isinstance(test.args[1], int):
            continue
        diff = test.args[0].producer if isinstance(test.args[0], Value) else None
        if diff is None or diff.name != "sub" or diff not in group.ops:
            continue
        col, row = (a.producer if isinstance(a, Value) else None for a in diff.args)
        if not (col and row and col.name == row.name == "iota" and col in group.ops and row in group.ops):
            continue
        if group.vmap[col.out][col.attrs["dim"]] != rank - 1 or group.vmap[row.out][row.attrs["dim"]] != rank - 2:
            continue
        # everything that reads the product other than through the kept side must not be exported
        reads = {out}
        for op in group.ops:
            if op is not where and any(a in reads for a in op.inputs):
                reads.add(op.out)
        if where.args[2] in reads or any(v in reads for v in group.exports):
            continue
        return _DEAD_TILE[test.name].format(c=test.args[1])
    return None


def _transposed(value) -> bool:
    """Made by swapping its last two dims (a Linear's weight.T): contiguous along K already, as a rule."""
    op = value.producer
    return op is not None and op.name == "transpose" and \
        {op.attrs.get("dim0") % value.rank, op.attrs.get("dim1") % value.rank} == {value.rank - 2, value.rank - 1}


def gemm_kernel(group: Group, host: HostContext, config: dict) -> KernelCode:
    op = group.anchor
    a, b = op.args
    out = op.out
    rank = out.rank
    kw = KernelWriter(kernel_name(group))
    lines = allocate(host, group.exports)
    identity = tuple(range(rank))
    sizes = space_sizes(group, host, [(out, identity)])
    an, bn = host.name(a), host.name(b)
    a_shape, b_shape = host.shape(a), host.shape(b)
    flatten_m = flattens_rows(group)
    if flatten_m:
        batch_dims: list[int] = []
        m_dims = list(range(rank - 1))
        a_mat = host.fresh(f"{an}_mat")
        lines.append(f"        {a_mat} = {an}.reshape(-1, {a_shape[-1]})")
        a_strides, b_strides = [f"{a_mat}.stride(0)", f"{a_mat}.stride(1)"], [f"{bn}.stride(0)", f"{bn}.stride(1)"]
        a_arg, b_arg = a_mat, bn
        a_batch, b_batch = [], []
    else:
        batch_dims = list(range(rank - 2))
        m_dims = [rank - 2]
        batch = [sizes[d] for d in batch_dims]
        a_arg, b_arg = an, bn
        if a.rank != rank or any(a.shape[i] != out.shape[i] for i in range(rank - 2)):
            a_arg = host.fresh(f"{an}_b")
            lines.append(f"        {a_arg} = {an}.expand({', '.join(batch + a_shape[-2:])})")
        if b.rank != rank or any(b.shape[i] != out.shape[i] for i in range(rank - 2)):
            b_arg = host.fresh(f"{bn}_b")
            lines.append(f"        {b_arg} = {bn}.expand({', '.join(batch + b_shape[-2:])})")
        a_strides = [f"{a_arg}.stride({rank - 2})", f"{a_arg}.stride({rank - 1})"]
        b_strides = [f"{b_arg}.stride({rank - 2})", f"{b_arg}.stride({rank - 1})"]
        a_batch = [f"{a_arg}.stride({d})" for d in batch_dims]
        b_batch = [f"{b_arg}.stride({d})" for d in batch_dims]
    b_rank = 2 if flatten_m else rank  # the rank of b_arg, which the kernel reads
    if config.get("precision") in TENSOR_CORE_FP32 and b.rank >= 2 and b_rank in (2, 3) and not _transposed(b):
        # a B tile must be contiguous along K for TF32 on the tensor cores: a (K, N) row-major B is copied
        # K-major first (a Linear's weight.t() already is, and passes through)
        kw.helpers.update({"_k_major", "_channels_last"})
        b_km = host.fresh(f"{bn}_k")
        lines.append(f"        {b_km} = _k_major({b_arg})")
        b_arg = b_km
        b_strides = [f"{b_arg}.stride({b_rank - 2})", f"{b_arg}.stride({b_rank - 1})"]
        if not flatten_m:
            b_batch = [f"{b_arg}.stride({d})" for d in batch_dims]
    split = config.get("precision") == SPLIT
    if split:  # hi and lo parts of A (..., M, K) and B (..., K, N), each K-contiguous, and their row factors
        kw.helpers.add("_split_fp16x3")
        a_rank = 2 if flatten_m else rank
        a_hi, a_lo, a_inv = host.fresh(f"{an}_hi"), host.fresh(f"{an}_lo"), host.fresh(f"{an}_inv")
        b_hi, b_lo, b_inv = host.fresh(f"{bn}_hi"), host.fresh(f"{bn}_lo"), host.fresh(f"{bn}_inv")
        lines.append(f"        {a_hi}, {a_lo}, {a_inv} = _split_fp16x3({a_arg}, -1)")
        lines.append(f"        {b_hi}, {b_lo}, {b_inv} = _split_fp16x3({b_arg}, -2)")
        a_arg, b_arg = a_hi, b_hi
        a_strides = [f"{a_arg}.stride({a_rank - 2})", f"{a_arg}.stride({a_rank - 1})"]
        b_strides = [f"{b_arg}.stride({b_rank - 2})", f"{b_arg}.stride({b_rank - 1})"]
        a_batch = [f"{a_arg}.stride({d})" for d in batch_dims]
        b_batch = [f"{b_arg}.stride({d})" for d in batch_dims]
    m_total = product([sizes[d] for d in m_dims])
    k_total = a_shape[-1]
    a_ptr = kw.arg("a_ptr", a_arg)
    b_ptr = kw.arg("b_ptr", b_arg)
    m = kw.arg("M", m_total)
    n = kw.arg("N", sizes[rank - 1])
    k = kw.arg("K", k_total)
    sam, sak = kw.arg("stride_am", a_strides[0]), kw.arg("stride_ak", a_strides[1])
    sbk, sbn = kw.arg("stride_bk", b_strides[0]), kw.arg("stride_bn", b_strides[1])
    tile_constexprs(kw, config, an, sizes[rank - 1])
    batch_entries = [[d] for d in batch_dims if group.space[d] != 1]
    batch_total = product([sizes[e[0]] for e in batch_entries]) if batch_entries else None
    split_k = int(config.get("SPLIT_K", 1)) > 1
    if split_k:  # the partial sums of a tile's SPLIT_K programs: (SPLIT_K, batch, M, N) in fp32
        parts, split_host = host.fresh(f"{host.name(out)}_parts"), host.fresh("split_k")
        lines.append(f"        {split_host} = {config['SPLIT_K']}")
        lines.append(wrap_call(f"        {parts} = torch.empty(({split_host}, {batch_total or 1}, {m_total}, "
                               f"{sizes[rank - 1]}), device={host.device()}, dtype=torch.float32)"))
        kw.constexpr("SPLIT_K", split_host)
        phase = kw.constexpr("PHASE", "1")
        parts_ptr = kw.arg("parts_ptr", parts)
        # a share's and a batch's offsets in 64 bits (the workspace may pass 2**31 elements at other sizes), a tile's
        # within one (M, N) slice as the output's are
        stride_part = kw.arg("stride_part", f"{parts}.stride(0)")
        parts_tile = (f"{parts_ptr} + "
                      + (f"pid_b.to(tl.int64) * {kw.arg('stride_part_b', f'{parts}.stride(1)')} + " if batch_entries
                         else "")
                      + f"rm[:, None] * {n} + rn[None, :]")
    # operand tiles through tensor descriptors (Hopper's copy engine; zero-filled past the edges, as the masked loads
    # are): the split's parts are K-contiguous, (batch, rows, K) in one piece, so a row's and a batch's offsets are
    # whole rows and only the rows' 16-byte alignment (K % 8) is checked, on the host
    tma = split and bool(config.get("tma"))
    if tma:
        a_lo_ptr, b_lo_ptr = kw.arg("a_lo_ptr", a_lo), kw.arg("b_lo_ptr", b_lo)
        kw.constexpr("TMA", f"{k_total} % 8 == 0")

    def descriptors(a_terms: list[str], b_terms: list[str]) -> None:
        kw.line("if TMA:  # else the pointer loads below")
        for desc, ptr, rows, stride, block, terms in (
                ("a_desc", a_ptr, m, sam, "BM", a_terms), ("a_lo_desc", a_lo_ptr, m, sam, "BM", a_terms),
                ("b_desc", b_ptr, n, sbn, "BN", b_terms), ("b_lo_desc", b_lo_ptr, n, sbn, "BN", b_terms)):
            kw.line(f"    {desc} = tl.make_tensor_descriptor({based(ptr, terms)}, shape=[{rows}, {k}], "
                    f"strides=[{stride}, 1], block_shape=[{block}, BK])")

    def based(ptr: str, terms: list[str]) -> str:
        return f"{ptr} + {' + '.join(terms)}" if terms else ptr

    if tma and not batch_entries:  # once a program, before its tiles
        descriptors([], [])
    persistent = bool(config.get("persistent"))
    if persistent:  # one program per multiprocessor, each taking every num_programs-th tile in turn
        kw.line(f"num_tiles = tl.cdiv({m}, BM) * tl.cdiv({n}, BN)")
        kw.line("for tile in range(tl.program_id(0), num_tiles, tl.num_programs(0)):")
        kw.indent += 1
        grouped_tiles(kw, m, n, pid="tile")
    else:
        grouped_tiles(kw, m, n)
    a_terms, b_terms, inv_terms = [], [], ["", ""]  # batch offsets of A, B (and, split, of their row factors)
    if batch_entries:
        kw.line("pid_b = tl.program_id(1)")
        batch_coords = unravel(kw, "pid_b", batch_entries, sizes, "bt")
        for entry, coord in zip(batch_entries, batch_coords):
            d = entry[0]
            a_terms.append(f"{coord} * {kw.arg(f'stride_a{d}', a_batch[d])}")
            b_terms.append(f"{coord} * {kw.arg(f'stride_b{d}', b_batch[d])}")
        if split:  # one batch dim at most (splittable)
            inv_terms = [f"{batch_coords[0]} * {kw.arg('stride_ainv', f'{a_inv}.stride(0)')} + ",
                         f"{batch_coords[0]} * {kw.arg('stride_binv', f'{b_inv}.stride(0)')} + "]
        if tma:  # based at this program's matrices (one batch a program: the gene is not offered persistent)
            descriptors(a_terms, b_terms)
    else:
        batch_coords = []

    a_at = f"rm[:, None] * {sam} + kk[None, :] * {sak}"
    b_at = f"kk[:, None] * {sbk} + rn[None, :] * {sbn}"
    a_mask, b_mask = f"(rm[:, None] < {m}) & (kk[None, :] < {k})", f"(kk[:, None] < {k}) & (rn[None, :] < {n})"
    kw.line("acc = tl.zeros((BM, BN), dtype=tl.float32)")
    k_start, k_stop, k_bound = "0", k, k
    dead = dead_tile(group)
    if split_k:
        kw.line(f"tile_ok = (rm[:, None] < {m}) & (rn[None, :] < {n})")
        # the first launch (PHASE 1, a program per tile and share of K) writes the partial sums; the second (one per
        # tile) adds them in a fixed order and runs the epilogue
        kw.line(f"if {phase} == 1:  # this program's share of K's steps")
        kw.indent += 1
        kw.line(f"k_span = tl.cdiv(tl.cdiv({k}, BK), SPLIT_K) * BK")
        kw.line("k_begin = tl.program_id(2) * k_span")
        kw.line(f"k_end = tl.minimum(k_begin + k_span, {k})")
        if dead is not None:
            kw.line(f"k_end = tl.where({dead}, k_begin, k_end)  # the triangle keeps nothing of this tile")
        k_start, k_stop, k_bound = "k_begin", "k_end", "k_end"
    elif dead is not None:
        kw.line(f"k_stop = tl.where({dead}, 0, {k})  # the triangle keeps nothing of this tile: no products")
        k_stop = "k_stop"
    if split:
        kw.line("acc_lo = tl.zeros((BM, BN), dtype=tl.float32)  # the products with a low part, 2**11 times too large")
        # the tensor cores' own accumulation loses bits a sum of thousands of products shows (0.15 of the fp32
        # tolerance on the H200 for K = 8192): the high products go to `acc` SPLIT_CHUNK steps at a time (0.01)
        kw.line(f"for k_chunk in range({k_start}, {k_stop}, BK * {SPLIT_CHUNK}):")
        kw.indent += 1
        kw.line("acc_hi = tl.zeros((BM, BN), dtype=tl.float32)")
        kw.line(f"for k0 in range(k_chunk, tl.minimum(k_chunk + BK * {SPLIT_CHUNK}, {k_bound}), BK):")
    else:
        kw.line(f"for k0 in range({k_start}, {k_stop}, BK):")
    kw.indent += 1
    if tma:  # B's descriptors read (N, K) tiles: transposed for the product
        kw.line("if TMA:")
        for name, row in (("a", "pid_m * BM"), ("b", "pid_n * BN"), ("a_lo", "pid_m * BM"), ("b_lo", "pid_n * BN")):
            kw.line(f"    {name} = {name}_desc.load([{row}, k0]){'.T' if name.startswith('b') else ''}")
        kw.line("else:")
        kw.indent += 1
    kw.line("kk = k0 + rk")
    kw.line(f"a = tl.load({based(a_ptr, a_terms)} + {a_at}, mask={a_mask}, other=0.0)")
    kw.line(f"b = tl.load({based(b_ptr, b_terms)} + {b_at}, mask={b_mask}, other=0.0)")
    if split:
        a_lo_ptr, b_lo_ptr = kw.arg("a_lo_ptr", a_lo), kw.arg("b_lo_ptr", b_lo)
        kw.line(f"a_lo = tl.load({based(a_lo_ptr, a_terms)} + {a_at}, mask={a_mask}, other=0.0)")
        kw.line(f"b_lo = tl.load({based(b_lo_ptr, b_terms)} + {b_at}, mask={b_mask}, other=0.0)")
        if tma:
            kw.indent -= 1
        kw.line("acc_hi = tl.dot(a, b, acc_hi)")
        kw.line("acc_lo = tl.dot(a, b_lo, acc_lo)")
        kw.line("acc_lo = tl.dot(a_lo, b, acc_lo)")
        kw.indent -= 1
        kw.line("acc += acc_hi")
    else:
        dot_step(kw, config, a, b)
    kw.indent -= 1
    if split:
        a_inv_ptr, b_inv_ptr = kw.arg("a_inv_ptr", a_inv), kw.arg("b_inv_ptr", b_inv)
        kw.line(f"row_inv = tl.load({a_inv_ptr} + {inv_terms[0]}rm, mask=rm < {m}, other=0.0)")
        kw.line(f"col_inv = tl.load({b_inv_ptr} + {inv_terms[1]}rn, mask=rn < {n}, other=0.0)")
        kw.line("acc = (acc + acc_lo * (1.0 / 2048.0)) * row_inv[:, None] * col_inv[None, :]")
    if split_k:
        kw.line(f"tl.store({parts_tile} + tl.program_id(2).to(tl.int64) * {stride_part}, acc, mask=tile_ok)")
        kw.indent -= 1
        kw.line("else:  # the partial sums, then the epilogue")
        kw.indent += 1
        kw.line(f"part_tile = {parts_tile}")
        kw.line("for part in range(SPLIT_K):")
        kw.line("    acc += tl.load(part_tile, mask=tile_ok, other=0.0)")
        kw.line(f"    part_tile += {stride_part}")
    kw.line("# epilogue: the ops after the product, on the accumulator tile")
    kw.line(f"m_ok = rm[:, None] < {m}")
    kw.line(f"n_ok = rn[None, :] < {n}")
    accesses = accesses_of(group)
    m_entries, merged = merge_dims([m_dims], accesses, group.space)
    m_coords = unravel(kw, "rm[:, None]", m_entries, sizes, "m") if m_entries else []
    entries = batch_entries + m_entries + ([[rank - 1]] if group.space[rank - 1] != 1 else [])
    coords = batch_coords + m_coords + (["rn[None, :]"] if group.space[rank - 1] != 1 else [])
    masks = [None] * len(batch_entries) + ["m_ok"] * len(m_entries) + ["n_ok"] * (len(entries) - len(batch_entries)
                                                                                   - len(m_entries))
    axes = [None] * len(batch_entries) + ["m"] * len(m_entries) + ["n"] * (len(entries) - len(batch_entries)
                                                                         - len(m_entries))
    access = Access(kw, host, Space(entries, coords, masks, axes, TILE_ZEROS, TILE_MASKS), merged - set(group.exports))
    emitter = Emitter(kw, host, group, access)
    emitter.bind(out, "acc", {"m", "n"})
    epilogue(emitter, access, group, rank - 1, n)
    if persistent or split_k:
        kw.indent -= 1
    tiles = tile_grid(m_total, sizes[rank - 1], config)
    if persistent:
        kw.helpers.add("_programs_resident")
        tiles = f"min({tiles}, _programs_resident({an}))"
    grid = f"lambda META: ({tiles}, {batch_total})" if batch_total else f"lambda META: ({tiles},)"
    if tma:  # the descriptors' global memory, which Triton asks for at the launch
        kw.helpers.add("_tma_scratch")
        lines.append("        triton.set_allocator(_tma_scratch)")
    options = {"num_warps": str(config["num_warps"]), "num_stages": str(config["num_stages"])}
    if split_k:  # the partial sums over a third grid axis, then (after the first launch's prelude) their sum
        lines.append(kw.launch(f"lambda META: ({tiles}, {batch_total or 1}, META['SPLIT_K'])", options))
        lines.append(kw.launch(grid, options, with_prelude=False, constants={phase: "2"}))
    else:
        lines.append(kw.launch(grid, options))
    return KernelCode(kw.source(), lines, kw.helpers, kw.name)
