"""The composer's channels-last copy kernel (`_channels_last` in emit/expr.py) alone, on one GPU: the first input
of each convolution problem of a suite copied from (N, C, *spatial) to (N, *spatial, C), timed with
triton.testing.do_bench (median), beside PyTorch's own channels-last copy (what torch.compile's layout
kernel does, in fp32).

Rows: torch's fp32 copy; our fp32 copy (mode 0); the fp16 copy as two passes (mode 1 then 2: the largest
magnitude, then the scaled copy); the fp16 copy as one pass plus a check (mode 3 then 4); and mode 3 + 4 with
other tile shapes (BS positions x BC channels a program, warps).

    python benchmarks/layout_copy.py [--suite benchmarks/conv_suite] [--problems 1-13] [--json PATH]
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
RESULTS_DIR = ROOT / "benchmarks" / "results"
TILES = [(64, 32, 4), (128, 32, 4), (64, 64, 4), (128, 64, 8), (256, 32, 8), (32, 64, 4), (32, 128, 4),
         (64, 128, 8), (16, 128, 4)]


def copy_module():
    from kfoundry.experts.composer.emit.expr import HELPERS

    path = Path(tempfile.mkdtemp()) / "channels_last_copy.py"
    path.write_text("import torch\nimport triton\nimport triton.language as tl\n\n" + HELPERS["_channels_last"])
    spec = importlib.util.spec_from_file_location("channels_last_copy", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def launch(module, t, out, stats, mode, tile):
    bs, bc, warps = tile
    spatial = list(t.shape[2:])
    sizes = [1] * (3 - len(spatial)) + spatial
    strides = [0] * (3 - len(spatial)) + [t.stride(2 + d) for d in range(len(spatial))]
    total = sizes[0] * sizes[1] * sizes[2]
    grid = (-(-total // bs), -(-t.shape[1] // bc), t.shape[0])
    module._channels_last_kernel[grid](t, out, stats, t.shape[1], total, sizes[1], sizes[2], t.stride(0),
                                       t.stride(1), strides[0], strides[1], strides[2], FLAT=True, ROUND_TF32=True,
                                       MODE=mode, BS=bs, BC=bc, num_warps=warps)


def main() -> int:
    import torch
    from triton.testing import do_bench

    from kfoundry.problem import load_problem_module, read_problem

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", type=Path, default=ROOT / "benchmarks" / "conv_suite")
    parser.add_argument("--problems", default="1-13")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from composer_variants import suite_problems

    module = copy_module()
    rows = []
    for path in suite_problems(args.problems, args.suite):
        problem = load_problem_module(read_problem(path))
        torch.manual_seed(0)
        x = problem.get_inputs()[0].cuda()
        out16 = torch.empty((x.shape[0], *x.shape[2:], x.shape[1]), device="cuda", dtype=torch.float16)
        out32 = torch.empty((x.shape[0], *x.shape[2:], x.shape[1]), device="cuda", dtype=torch.float32)
        stats = torch.zeros(2, device="cuda")
        fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
        row = {"problem": path.stem, "shape": list(x.shape), "mb": round(x.numel() * 4 / 1e6, 1)}

        def timed(fn):
            return round(float(do_bench(fn, warmup=25, rep=200, return_mode="median")), 4)

        row["torch_fp32"] = timed(lambda: x.contiguous(memory_format=fmt))
        row["ours_fp32"] = timed(lambda: launch(module, x, out32, out32, 0, TILES[0]))
        row["fp16_two_pass"] = timed(lambda: (stats.zero_(), launch(module, x, out16, stats, 1, TILES[0]),
                                              launch(module, x, out16, stats, 2, TILES[0])))
        for tile in TILES:
            row[f"fp16_one_pass_{tile[0]}x{tile[1]}w{tile[2]}"] = timed(
                lambda tile=tile: (stats.zero_(), launch(module, x, out16, stats, 3, tile),
                                   launch(module, x, out16, stats, 4, tile)))
        reference = None
        for tile in TILES:  # every tile writes the same copy as the first
            stats.zero_()
            launch(module, x, out16, stats, 3, tile)
            launch(module, x, out16, stats, 4, tile)
            if reference is None:
                reference = out16.clone()
            assert torch.equal(out16, reference), tile
        rows.append(row)
        print(json.dumps(row), flush=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = args.json or RESULTS_DIR / f"layout_copy-{stamp}.json"
    out.write_text(json.dumps({"created_utc": stamp, "device": torch.cuda.get_device_name(),
                               "torch": torch.__version__, "rows": rows}, indent=1))
    keys = [k for k in rows[0] if k not in ("problem", "shape", "mb")]
    print("problem".ljust(40) + "".join(k.replace("fp16_one_pass_", "")[:13].rjust(14) for k in keys))
    for row in rows:
        print(row["problem"][:39].ljust(40) + "".join(f"{row[k]:14.4f}" for k in keys))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
