"""fp32 GEMMs on the tensor cores at fp32's accuracy: TF32x3 against fp16x3 (each operand split into a high and a
low fp16 part after a power-of-two scale per row, three fp16 products, the low ones in an accumulator of their
own), on the GPU, side by side in one process.

For each shape it prints and writes (JSON) the do_bench median of:
- `eager`: torch.matmul in fp32 (cuBLAS, TF32 off: PyTorch's default);
- `cublas_tf32`: the same with TF32 on (one TF32 product: context only, it fails an fp32 tolerance of 1e-4);
- `tf32x3 BMxBNxBK/wW/sS`: one Triton kernel, `input_precision="tf32x3"`, on fp32 operands;
- `fp16x3 ...`: the composer's split helper (a Triton kernel per operand, timed with the GEMM) and a
  three-product kernel (`chunk N`: the high products summed N k-steps at a time, then added to the running sum);
- `split A/B alone [RxK]`: the split helper alone, in its own tiles or in R rows x K a program;
and for each its TFLOP/s, the fraction of the 3xTF32 roof (3 x 2MNK at the datasheet's dense TF32 rate, and at
the rate measured here with cuBLAS TF32), and its error against the float64 product as the evaluator's fp32
check sees it: max |out - ref| / (atol + rtol |ref|) at 1e-4 (at most 1 passes).

    python benchmarks/gemm_precisions.py [--shapes 1024x8192x8192,...] [--out FILE]

A shape MxNxK is C (M x N) = A (M x K) @ B with B given as a Linear's weight (N x K); a shape suffixed `t` gives
B as K x N (torch.matmul of two inputs)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
DATASHEET_TF32_TFLOPS = {"H200": 495.0, "H100": 495.0}  # dense, no sparsity
TOLERANCE = 1e-4
DEFAULT_SHAPES = "1024x8192x8192,8192x4096x4096,2048x4096x8192,16384x4096x1024t"
TF32X3_CONFIGS = [(128, 128, 32, 8, 3), (128, 64, 32, 4, 4), (128, 128, 64, 8, 3)]
FP16X3_CONFIGS = [(128, 128, 64, 8, 3), (64, 128, 64, 4, 4), (128, 128, 32, 8, 4), (128, 64, 64, 4, 4),
                  (128, 128, 64, 4, 3), (64, 256, 64, 8, 3)]
SPLIT_TILES = [(1, 2048), (2, 1024), (4, 512), (16, 128), (32, 64), (64, 32)]  # (rows, K) a program
CHUNKS = (8, 32)  # k-steps whose high products share an accumulator before it joins the running sum


@triton.jit
def tile_of(M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP_M: tl.constexpr):
    """This program's output rows and columns, tiles visited GROUP_M rows of tiles at a time (L2 reuse)."""
    pid = tl.program_id(0)
    num_m, num_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    in_group = GROUP_M * num_n
    first_m = (pid // in_group) * GROUP_M
    rows_in_group = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % rows_in_group
    pid_n = (pid % in_group) // rows_in_group
    return pid_m * BM + tl.arange(0, BM), pid_n * BN + tl.arange(0, BN)


@triton.jit
def fp16x3_step(ahi_ptr, alo_ptr, bhi_ptr, blo_ptr, rm, rn, k0, K, high, low, BK: tl.constexpr):
    """One k-step of the three fp16 products from the split parts (A: M x K, B: N x K, both K-contiguous)."""
    rk = k0 + tl.arange(0, BK)
    a_at, b_at = rm[:, None] * K + rk[None, :], rn[None, :] * K + rk[:, None]
    a_mask, b_mask = (rk < K)[None, :], (rk < K)[:, None]  # rows past M or N are clamped by the caller
    a_hi = tl.load(ahi_ptr + a_at, mask=a_mask, other=0.0)
    a_lo = tl.load(alo_ptr + a_at, mask=a_mask, other=0.0)
    b_hi = tl.load(bhi_ptr + b_at, mask=b_mask, other=0.0)
    b_lo = tl.load(blo_ptr + b_at, mask=b_mask, other=0.0)
    high = tl.dot(a_hi, b_hi, high)
    low = tl.dot(a_hi, b_lo, low)
    low = tl.dot(a_lo, b_hi, low)
    return high, low


@triton.jit
def fp16x3_kernel(ahi_ptr, alo_ptr, ainv_ptr, bhi_ptr, blo_ptr, binv_ptr, c_ptr, M, N, K,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                  CHUNK: tl.constexpr):
    """C = A @ B^T from the split parts; CHUNK > 0: the high products summed CHUNK k-steps at a time in an
    accumulator of their own, then added to the running sum by the FMA units (rounded to nearest)."""
    rm, rn = tile_of(M, N, BM, BN, GROUP_M)
    m_ok, n_ok = rm < M, rn < N
    rm_in, rn_in = tl.where(m_ok, rm, 0), tl.where(n_ok, rn, 0)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    low = tl.zeros([BM, BN], dtype=tl.float32)
    if CHUNK == 0:
        for k0 in range(0, K, BK):
            acc, low = fp16x3_step(ahi_ptr, alo_ptr, bhi_ptr, blo_ptr, rm_in, rn_in, k0, K, acc, low, BK)
    else:
        for k1 in range(0, K, BK * CHUNK):
            part = tl.zeros([BM, BN], dtype=tl.float32)
            for k0 in range(k1, tl.minimum(k1 + BK * CHUNK, K), BK):
                part, low = fp16x3_step(ahi_ptr, alo_ptr, bhi_ptr, blo_ptr, rm_in, rn_in, k0, K, part, low, BK)
            acc = acc + part
    out = acc + low * (1.0 / 2048.0)
    a_inv = tl.load(ainv_ptr + rm, mask=m_ok, other=0.0)
    b_inv = tl.load(binv_ptr + rn, mask=n_ok, other=0.0)
    out = out * a_inv[:, None] * b_inv[None, :]
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], out, mask=m_ok[:, None] & n_ok[None, :])


@triton.jit
def tf32x3_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_bn, stride_bk,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    """C = A @ B^T with fp32 operands, three TF32 products per step (A: M x K contiguous, B: N x K by strides)."""
    rm, rn = tile_of(M, N, BM, BN, GROUP_M)
    rk = tl.arange(0, BK)
    m_ok, n_ok = rm < M, rn < N
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k0 in range(0, K, BK):
        k_ok = (k0 + rk) < K
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptr + rn[None, :] * stride_bn + (k0 + rk)[:, None] * stride_bk,
                    mask=n_ok[None, :] & k_ok[:, None], other=0.0)
        acc = tl.dot(a, b, acc, input_precision="tf32x3")
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=m_ok[:, None] & n_ok[None, :])


def composer_helpers():
    """The composer's own split helper (the code its candidates carry), loaded from a file as Triton needs."""
    from kfoundry.experts.composer.emit.expr import HELPERS

    path = Path(tempfile.mkdtemp(prefix="kf-gemm-")) / "split_helper.py"
    path.write_text("import torch\nimport triton\nimport triton.language as tl\n\n" + HELPERS["_split_fp16x3"])
    spec = importlib.util.spec_from_file_location("split_helper", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HELPER = None


def split(x: torch.Tensor, rows_along: int, tiles: tuple[int, int] | None = None):
    """x's rows (dim `rows_along` indexes them, the other dim is K) as the composer splits them: fp16 hi, lo
    (K-contiguous) and 2^-e per row; `tiles` (rows, K) overrides the helper's choice."""
    global HELPER
    HELPER = HELPER or composer_helpers()
    k_dim = -1 if rows_along == 0 else -2
    if tiles is None:
        return HELPER._split_fp16x3(x, k_dim)
    saved = dict(HELPER._SPLIT_TILES)
    HELPER._SPLIT_TILES.update({key: tiles for key in saved})
    try:
        return HELPER._split_fp16x3(x, k_dim)
    finally:
        HELPER._SPLIT_TILES.update(saved)


def fp16x3(a: torch.Tensor, b: torch.Tensor, b_rows_along: int, config, chunk: int = 0) -> torch.Tensor:
    bm, bn, bk, warps, stages = config
    m, k = a.shape
    n = b.shape[b_rows_along]
    a_hi, a_lo, a_inv = split(a, 0)
    b_hi, b_lo, b_inv = split(b, b_rows_along)
    if b_rows_along == 1:  # (K, N) parts as the helper returns them: (N, K) in memory
        b_hi, b_lo = b_hi.t(), b_lo.t()
    c = torch.empty((m, n), device=a.device, dtype=torch.float32)
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    fp16x3_kernel[grid](a_hi, a_lo, a_inv, b_hi, b_lo, b_inv, c, m, n, k, BM=bm, BN=bn, BK=bk, GROUP_M=8,
                        CHUNK=chunk, num_warps=warps, num_stages=stages)
    return c


def tf32x3(a: torch.Tensor, b: torch.Tensor, b_rows_along: int, config) -> torch.Tensor:
    bm, bn, bk, warps, stages = config
    m, k = a.shape
    n = b.shape[b_rows_along]
    c = torch.empty((m, n), device=a.device, dtype=torch.float32)
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    tf32x3_kernel[grid](a, b, c, m, n, k, b.stride(b_rows_along), b.stride(1 - b_rows_along), BM=bm, BN=bn, BK=bk,
                        GROUP_M=8, num_warps=warps, num_stages=stages)
    return c


def error_ratio(out: torch.Tensor, truth: torch.Tensor) -> float:
    """The evaluator's fp32 check as one number: at most 1 passes."""
    return float(((out.double() - truth).abs() / (TOLERANCE + TOLERANCE * truth.abs())).max())


def measured_tf32_tflops(device: str) -> float:
    """cuBLAS TF32 on an 8192-cube: the rate device_facts measures the same way."""
    a = torch.randn(8192, 8192, device=device)
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        ms = triton.testing.do_bench(lambda: a @ a, warmup=50, rep=300, return_mode="median")
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    return 2 * 8192 ** 3 / (ms * 1e-3) / 1e12


def run_shape(text: str, datasheet: float | None, measured: float) -> dict:
    transposed = text.endswith("t")
    m, n, k = (int(part) for part in text.rstrip("t").split("x"))
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", generator=gen)
    bound = 1 / k ** 0.5  # a Linear's weight init; a second input is randn
    if transposed:
        b, rows_along = torch.randn(k, n, device="cuda", generator=gen), 1
    else:
        b, rows_along = (torch.rand(n, k, device="cuda", generator=gen) * 2 - 1) * bound, 0
    b_nk = b.t() if transposed else b
    truth = a.double() @ b_nk.double().t()
    flop = 2 * m * n * k
    roof_ms = {"datasheet": 3 * flop / (datasheet * 1e12) * 1e3 if datasheet else None,
               "measured": 3 * flop / (measured * 1e12) * 1e3}
    methods = {"eager": lambda: a @ b_nk.t()}

    def tf32_cublas():
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            return a @ b_nk.t()
        finally:
            torch.backends.cuda.matmul.allow_tf32 = False

    methods["cublas_tf32"] = tf32_cublas
    for config in TF32X3_CONFIGS:
        methods["tf32x3 %dx%dx%d/w%d/s%d" % config] = lambda c=config: tf32x3(a, b, rows_along, c)
    for config in FP16X3_CONFIGS:
        methods["fp16x3 %dx%dx%d/w%d/s%d" % config] = lambda c=config: fp16x3(a, b, rows_along, c)
    for config in FP16X3_CONFIGS[:2]:
        for chunk in CHUNKS:
            methods[f"fp16x3 chunk {chunk} " + "%dx%dx%d/w%d/s%d" % config] = \
                lambda c=config, ch=chunk: fp16x3(a, b, rows_along, c, ch)
    methods["split A alone"] = lambda: split(a, 0)
    methods["split B alone"] = lambda: split(b, rows_along)
    for tiles in SPLIT_TILES:
        methods["split A alone %dx%d" % tiles] = lambda t=tiles: split(a, 0, t)
        methods["split B alone %dx%d" % tiles] = lambda t=tiles: split(b, rows_along, t)
    rows = []
    for name, fn in methods.items():
        row = {"method": name}
        try:
            out = fn()
            torch.cuda.synchronize()
            if isinstance(out, torch.Tensor):
                row["error_ratio"] = round(error_ratio(out, truth), 4)
            del out
            ms = triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
            row["ms"] = round(ms, 4)
            if not name.startswith("split"):  # a whole product: its rate and its share of the roof
                row["tflops"] = round(flop / (ms * 1e-3) / 1e12, 1)
                row["roof_fraction_datasheet"] = round(roof_ms["datasheet"] / ms, 3) if roof_ms["datasheet"] else None
                row["roof_fraction_measured"] = round(roof_ms["measured"] / ms, 3)
        except Exception as exc:  # noqa: BLE001 -- a config that does not compile is a row, not the end
            row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        rows.append(row)
        print(f"  {name:36s} " + (f"{row['ms']:8.3f} ms {row.get('tflops', '-')} TF/s roof "
                                  f"{row.get('roof_fraction_datasheet', '-')}/{row.get('roof_fraction_measured', '-')} "
                                  f"err {row.get('error_ratio', '-')}"
                                  if "ms" in row else row.get("error", "")), flush=True)
    return {"shape": text, "m": m, "n": n, "k": k, "b_layout": "KxN" if transposed else "NxK",
            "roof_ms": roof_ms, "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=DEFAULT_SHAPES)
    parser.add_argument("--out", type=Path, default=Path("gemm_precisions.json"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name()
    datasheet = next((v for key, v in DATASHEET_TF32_TFLOPS.items() if key in name), None)
    measured = measured_tf32_tflops("cuda")
    print(f"{name}: TF32 datasheet {datasheet} TFLOP/s, measured (cuBLAS 8192^3) {measured:.1f}", flush=True)
    record = {"device": name, "torch": torch.__version__, "triton": triton.__version__,
              "python": platform.python_version(), "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "tf32_tflops": {"datasheet": datasheet, "measured": round(measured, 1)}, "shapes": []}
    for shape in args.shapes.split(","):
        print(shape, flush=True)
        record["shapes"].append(run_shape(shape.strip(), datasheet, measured))
        args.out.write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
