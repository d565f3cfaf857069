"""What a Triton kernel configuration needs of a GPU -- shared memory, registers and threads per block -- against
what the target device has, and configurations shrunk until they fit. The one estimate that the composer's
templates (each `configs()`) and the tuner (kfoundry.experts.tuner) check before a candidate is emitted.

Shared memory: Triton's `metadata.shared`, the bytes a block allocates; above the device's opt-in maximum per
block the launch fails with "out of resource: shared memory, Required: ..., Hardware limit: ...".

    estimate = max(pipeline, epilogue) + RESERVE
    pipeline = num_stages x (a_copies x BM x BK + b_copies x BK x BN) x element bytes
    epilogue = epilogue tiles x BM x BN x 4       (the fp32 accumulators the epilogue reads)

* pipeline: Triton's software pipeliner gives each tile the main loop loads for a dot a ring of num_stages
  buffers in shared memory (num_stages of them, not num_stages - 1). `copies`: the tiles loaded per operand each
  k-step: 1; 2 for the fp16x3 split, which loads a hi and a lo tile of each operand (2 bytes each); an LSTM
  step loads one weight tile per gate. tf32x3 splits its fp32 tiles in registers after the load: one copy of 4
  bytes (128x128x64 in 3 stages, 192 KiB by this formula, runs on the H200; with hi and lo copies it would not).
* epilogue: the accumulator tile, converted from the layout the dot (or an outer product) leaves it in to the
  layout of the stores, goes through shared memory whole. It is not live while the pipeline's buffers are,
  so the larger of the two counts.
* RESERVE: what lives beside them (barriers, reduction scratch, small conversions inside the loop).
* Kernels without a dot (pointwise, pooling, scans, rows): a cross-warp reduction's scratch,
  rows x num_warps x 8 bytes, plus RESERVE.

Calibration, against the `Required` bytes of Triton 3.6's OutOfResources on an H200 (limit 232448 B):
benchmarks/results/archive/gemm_precisions-h200-20261203a.json and
benchmarks/results/gemm_precisions-h200-20261203c-chunks-split-tiles.json (fp16x3 GEMMs) -- 128x128x64 in 4
stages asked 262144 B (pipeline 262144), 128x256x64 and 256x128x64 in 3 stages 294912 (pipeline 294912),
64x256x64 in 3 stages 249856 (pipeline 245760: 4096 B more);
benchmarks/results/ghost_replay-nvidia-h200-20261204T182327Z.json: the composer's outer-product (fma)
convolution with a 1024x64 fp32 accumulator and no dot asked 262144 (epilogue 262144: the "tf32x3" in that
candidate's name is its GEMM's, not this kernel's); benchmarks/results/archive/eval_throughput-h200-20261201c2.json:
a tuner child of a conv reduced over its 64 channels asked 327680, which BM 256, BN 64, BK 64 in 4 stages gives
(pipeline 327680; the candidate file is gone: reconstructed from its grid and the tuner's moves). Without the
reserve the formula equals five of the six figures and is 4096 B (1.6 %) short of one; with it, the estimate is
4096 to 8192 B above every figure (margin: +1.6 % to +3.2 %, never below). Configurations that compiled on the same
H200 (fp16x3 128x128x64 in 3 stages: 200 KiB estimated; tf32x3 128x128x64 in 3 stages) fit. It may err high: a
loop Triton does not pipeline still counts num_stages buffers.

Registers (32-bit, per thread; over the limit ptxas spills to local memory, slow but no error):

    accumulators x BM x BN / threads  +  fragments  +  REGISTER_OVERHEAD
    fragments = (a_copies x BM + b_copies x BN) x min(BK, 16) x element bytes / 4 / threads

the fp32 accumulators, a k-slice of 16 of each operand tile as the tensor cores take it, and the addresses,
indices and masks; a kernel without a dot keeps its tile, elements / threads. Limit: min(255, registers per
block / threads), 65536 / threads on every GPU since Kepler. Threads: num_warps x 32 <= 1024.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kfoundry.evaluate.shared.gpu_table import TYPICAL, lookup
from kfoundry.types import DeviceFacts

KiB = 1024
RESERVE = 8 * KiB
REGISTER_OVERHEAD = 24
MMA_K = 16  # the k-slice of an operand tile the tensor cores take at once
WARP = 32
MIN_STAGES = 2  # shrinking stops pipelining last: one stage leaves every load exposed
MIN_TILE = 16  # tl.dot's smallest M, N and K
SHRINK_ORDER = ("num_stages", "BK", "BM", "BN")  # fewer stages first, then smaller tiles


@dataclass(frozen=True)
class DeviceLimits:
    """The per-block limits a kernel configuration must fit."""

    name: str
    shared_memory_per_block: int  # bytes, the opt-in maximum
    max_registers_per_thread: int = 255
    registers_per_block: int = 65536
    max_threads_per_block: int = 1024

    def register_limit(self, threads: int) -> int:
        return min(self.max_registers_per_thread, self.registers_per_block // max(threads, 1))


# Where no device is named (a CPU run without --target-gpu, a script calling compose()), the GPU a prompt assumes
# when none was named (gpu_table.TYPICAL, an H100: 227 KiB a block). A run on a GPU, or with --target-gpu, fits
# its kernels to that GPU instead (an RTX 4090's or L40S's 99 KiB, an A100's 163 KiB).
def _typical_shared() -> int:
    return lookup(TYPICAL).shared_memory_per_block_bytes


DEFAULT_LIMITS = DeviceLimits(f"the typical target ({TYPICAL}: {_typical_shared() // KiB} KiB a block)",
                              _typical_shared())

def limits_of(device: DeviceFacts | DeviceLimits | None) -> DeviceLimits:
    """The limits of `device`: its facts (measured, or a named target's datasheet), filled from the bundled table
    by name; with none (no device, a CPU, a GPU the table does not know), DEFAULT_LIMITS."""
    if isinstance(device, DeviceLimits):
        return device
    if device is None or device.kind == "cpu":
        return DEFAULT_LIMITS
    spec = lookup(device.name)
    shared = device.shared_memory_per_block_bytes or (spec.shared_memory_per_block_bytes if spec else None)
    if not shared:
        return DEFAULT_LIMITS
    registers = device.registers_per_sm or (spec.registers_per_sm if spec else None) or 65536
    per_thread = device.max_registers_per_thread or (spec.max_registers_per_thread if spec else None) or 255
    return DeviceLimits(device.name, shared, per_thread, registers)


def kernel_target(measured: DeviceFacts | None, target_gpu: str | None = None) -> DeviceFacts | None:
    """The device a run's kernels are for: the GPU it runs on; on a CPU, the --target-gpu named; else None
    (DEFAULT_LIMITS)."""
    if measured is not None and measured.kind != "cpu":
        return measured
    if target_gpu:
        from kfoundry.evaluate.shared.device_facts import target_facts

        return target_facts(target_gpu)
    return None


@dataclass(frozen=True)
class Need:
    """What one configuration needs: shared memory (bytes), registers per thread, threads per block, and the terms
    of the shared-memory estimate."""

    shared_bytes: int
    registers: int
    threads: int
    pipeline_bytes: int = 0
    epilogue_bytes: int = 0


@dataclass(frozen=True)
class Fit:
    need: Need
    limits: DeviceLimits
    reasons: tuple[str, ...] = field(default=())

    @property
    def fits(self) -> bool:
        return not self.reasons

    def __bool__(self) -> bool:
        return self.fits

    def message(self) -> str:
        return "fits" if self.fits else "; ".join(self.reasons)


def dot_need(bm: int, bn: int, bk: int, *, num_warps: int, num_stages: int, element_bytes: int = 4,
             a_copies: int = 1, b_copies: int = 1, accumulators: int = 1, epilogue_tiles: int | None = None) -> Need:
    """A loop of `tl.dot` over BK-deep tiles into `accumulators` BM x BN fp32 tiles, `epilogue_tiles` of them
    (all, by default) converted for the stores (the module's formulas). An outer-product loop
    (acc += a[:, None] * b[None, :]) is the same with BK = 1."""
    threads = num_warps * WARP
    pipeline = max(num_stages, 1) * (a_copies * bm * bk + b_copies * bk * bn) * element_bytes
    epilogue = (accumulators if epilogue_tiles is None else epilogue_tiles) * bm * bn * 4
    fragments = (a_copies * bm + b_copies * bn) * min(bk, MMA_K) * element_bytes // 4
    registers = -(-(accumulators * bm * bn + fragments) // threads) + REGISTER_OVERHEAD
    return Need(max(pipeline, epilogue) + RESERVE, registers, threads, pipeline, epilogue)


def tile_need(elements: int, *, num_warps: int, rows: int = 1) -> Need:
    """A kernel without a dot that keeps `elements` values in registers, reducing `rows` rows across warps."""
    threads = num_warps * WARP
    return Need(rows * num_warps * 8 + RESERVE, -(-elements // threads) + REGISTER_OVERHEAD, threads)


def check(need: Need, device: DeviceFacts | DeviceLimits | None = None) -> Fit:
    """Whether `need` fits `device` (see `limits_of` for None), and why not."""
    limits = limits_of(device)
    reasons = []
    if need.shared_bytes > limits.shared_memory_per_block:
        reasons.append(f"shared memory: needs ~{need.shared_bytes} B (pipeline {need.pipeline_bytes}, epilogue "
                       f"{need.epilogue_bytes}, +{RESERVE}), {limits.name} has {limits.shared_memory_per_block}")
    if need.threads > limits.max_threads_per_block:
        reasons.append(f"threads: {need.threads} a block, {limits.name} allows {limits.max_threads_per_block}")
    elif need.registers > limits.register_limit(need.threads):
        reasons.append(f"registers: ~{need.registers} a thread, at most {limits.register_limit(need.threads)} "
                       f"with {need.threads} threads")
    return Fit(need, limits, tuple(reasons))


def _shrunk(config: dict, fit: Fit, fixed: Iterable[str]) -> dict | None:
    """One step smaller: shared memory held by the pipeline -> fewer stages, then a shallower BK; otherwise
    (the epilogue, registers, threads) the wider of BM and BN halved. None when nothing can shrink."""
    need = fit.need
    if need.threads > fit.limits.max_threads_per_block and config.get("num_warps", 1) > 1:
        return dict(config, num_warps=config["num_warps"] // 2)
    over_shared = need.shared_bytes > fit.limits.shared_memory_per_block
    movable = [k for k in SHRINK_ORDER if k in config and k not in fixed and isinstance(config[k], int)]
    if over_shared and need.pipeline_bytes >= need.epilogue_bytes:
        if "num_stages" in movable and config["num_stages"] > MIN_STAGES:
            return dict(config, num_stages=config["num_stages"] - 1)
        if "BK" in movable and config["BK"] > MIN_TILE:
            return dict(config, BK=config["BK"] // 2)
    tiles = [k for k in ("BM", "BN") if k in movable and config[k] > MIN_TILE]
    if tiles:
        widest = max(tiles, key=lambda k: config[k])
        return dict(config, **{widest: config[widest] // 2})
    return None


def fit_config(config: dict, need_of: Callable[[dict], Need], device: DeviceFacts | DeviceLimits | None = None,
               fixed: Iterable[str] = ()) -> dict | None:
    """`config` if it fits `device`, else the first smaller one that does (fewer stages first, then smaller
    tiles; the keys in `fixed` never change), or None."""
    fixed = tuple(fixed)
    while config is not None:
        fit = check(need_of(config), device)
        if fit:
            return config
        config = _shrunk(config, fit, fixed)
    return None


def fit_configs(configs: Iterable[dict], need_of: Callable[[dict], Need],
                device: DeviceFacts | DeviceLimits | None = None, fixed: Iterable[str] = ()) -> list[dict]:
    """Each configuration fitted to `device` (`fit_config`), in order, without repeats; those that cannot fit are
    dropped. Raises DoesNotFit when none fits."""
    configs, out = list(configs), []
    for config in configs:
        fitted = fit_config(config, need_of, device, fixed)
        if fitted is not None and fitted not in out:
            out.append(fitted)
    if configs and not out:
        raise DoesNotFit(f"no tile configuration fits {limits_of(device).name} ({configs[0]}: "
                         f"{check(need_of(configs[0]), device).message()})")
    return out


class DoesNotFit(ValueError):
    """No configuration of a kernel fits the target device."""


# operand tiles per k-step, their bytes and the fp32 accumulators in registers (fp16x3: the sum, the chunk's high
# products, the low products; one tile reaches the epilogue), by the composer's dot precisions (gemm.SPLIT,
# gemm.HALF); the others load each operand once at the tensors' own width
PRECISION_OPERANDS = {"fp16x3": (2, 2, 3), "fp16": (1, 2, 1)}


def composer_dot_need(config: dict, *, n_full: int | None = None, element_bytes: int = 4, b_tiles: int = 1,
                      accumulators: int = 1, k_step: int | None = None) -> Need:
    """A composer dot configuration's need (BM, BN, BK, num_warps, num_stages, precision keys): BN "full" is
    `n_full` columns rounded up to a power of two (at least 16, as the host sizes it); `b_tiles` weight tiles
    and `accumulators` accumulators (an LSTM step's four gates); `k_step` the reduction depth a loop step
    loads when it is not BK (1: an outer-product loop)."""
    bn = config["BN"]
    if bn == "full":
        bn = max(MIN_TILE, next_power_of_2(n_full or MIN_TILE))
    copies, width, accs = PRECISION_OPERANDS.get(config.get("precision", ""), (1, element_bytes, 1))
    return dot_need(config["BM"], bn, k_step or config["BK"], num_warps=config["num_warps"],
                    num_stages=config.get("num_stages", TRITON_DEFAULT_STAGES), element_bytes=width,
                    a_copies=copies, b_copies=copies * b_tiles, accumulators=max(accs, accumulators),
                    epilogue_tiles=accumulators)


TRITON_DEFAULT_STAGES = 3  # a launch that does not set num_stages


def next_power_of_2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()
