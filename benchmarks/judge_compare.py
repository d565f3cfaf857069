"""The judge's comparison of one large output on the GPU: PyTorch's float64 passes against the fused
one-pass kernel (kfoundry.evaluate.compare_fused), on the same tensors, in one run.

For outputs of 0.26, 1.07 and 2.15 GB (fp32): the median of 5 comparisons each way (after one warm-up
that also compiles the kernel), the peak of extra GPU memory each way, and whether both gave the same
figures. The candidate's output is the reference plus noise at 1e-5, with one element off by 1.

    python benchmarks/judge_compare.py [--json benchmarks/results/judge_compare-....json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402

from kfoundry.evaluate import compare, compare_fused  # noqa: E402


def timed(fn) -> tuple[float, int, object]:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    start = time.perf_counter()
    result = fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3, torch.cuda.max_memory_allocated() - base, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    import triton

    rows = []
    for elements in (64 << 20, 256 << 20, 512 << 20):
        g = torch.Generator(device="cuda").manual_seed(0)
        truth = torch.randn(elements, device="cuda", dtype=torch.float64, generator=g)
        reference = truth.float()
        candidate = reference + 1e-5 * torch.randn(elements, device="cuda", generator=g)
        candidate[elements // 3] += 1.0
        atol = 1e-4
        row = {"output_gb": round(elements * 4 / 1e9, 2)}
        usable = compare_fused.usable

        def run(c=candidate, r=reference, t=truth):
            return compare.compare_tensor(c, r, t, atol, atol)

        for name, choose in (("torch", lambda *a: False), ("fused", usable)):
            compare_fused.usable = choose  # compare_tensor asks compare_fused.usable which way to go
            try:
                timed(run)  # warm-up: the kernel compiles, the allocator caches
                samples = [timed(run) for _ in range(5)]
            finally:
                compare_fused.usable = usable
            row[f"{name}_ms"] = round(statistics.median(s[0] for s in samples), 2)
            row[f"{name}_extra_gb"] = round(max(s[1] for s in samples) / 1e9, 2)
            row[f"{name}_result"] = samples[-1][2]
        a, b = row.pop("torch_result"), row.pop("fused_result")
        fields = ("passed", "max_abs_error", "max_rel_error", "mismatch_fraction", "first_bad_index",
                  "error_ratio_candidate", "error_ratio_reference")
        row["differing"] = {f: [getattr(a, f), getattr(b, f)] for f in fields if getattr(a, f) != getattr(b, f)}
        row["same_figures"] = not row["differing"]
        row["passed"], row["message"] = b.passed, b.message[:160]
        row["speedup"] = round(row["torch_ms"] / row["fused_ms"], 1)
        rows.append(row)
        del truth, reference, candidate, run
        torch.cuda.empty_cache()
    record = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
              "rows": rows}
    print(f"{'output GB':>9} {'torch ms':>9} {'fused ms':>9} {'speedup':>8} {'torch extra GB':>15} "
          f"{'fused extra GB':>15} same")
    for r in rows:
        print(f"{r['output_gb']:9.2f} {r['torch_ms']:9.2f} {r['fused_ms']:9.2f} {r['speedup']:7.1f}x "
              f"{r['torch_extra_gb']:15.2f} {r['fused_extra_gb']:15.2f} {r['same_figures']}")
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%MZ")
    out = Path(args.json or ROOT / "benchmarks" / "results" / f"judge_compare-h200-{stamp}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
