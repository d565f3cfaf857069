"""Do CPU verdicts agree with GPU verdicts on precision? Each problem of this folder (a Linear, a 3x3
convolution with a ReLU, a convolution followed by GroupNorm) gets a hand-written candidate at every
`tl.dot` precision of candidates.py (IEEE, TF32, TF32x3, fp16, fp16x3 split), judged by the evaluator on the
CPU (Triton's interpreter, with the GPU's arithmetic emulated: kfoundry.evaluate.worker.emulated_precision) and on
the GPU, at the same sizes, fp32 at --tolerance. Prints a table (problem, precision, each device's verdict
with e(candidate) and e(reference) against the float64 truth, whether they agree) and writes JSON.

On a GPU it first measures how the tensor cores round an fp32 operand to TF32 (one product per output:
identity @ B at "tf32" is B rounded, bit for bit), and whether the emulation of "tf32x3" matches.

    python benchmarks/precision_agreement/run.py [--devices cpu,cuda] [--trials 3] [--out benchmarks/results]
    python benchmarks/precision_agreement/run.py --devices cpu --merge GPU_RECORD.json   # CPU here, GPU there

Triton's interpreter on the H200 image fails on `range()` over a kernel argument ("only 0-dimensional arrays
can be converted to Python scalars", from its numpy), so the CPU column is measured on a CPU machine and merged
(--merge) with the GPU machine's record: the same problems, sizes and seeds.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PROBLEMS = ("linear_bias", "conv2d_relu", "conv2d_groupnorm")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="cpu,cuda", help="comma-separated: cpu, cuda")
    parser.add_argument("--problems", default=",".join(PROBLEMS))
    parser.add_argument("--dots", default=None, help="comma-separated precisions (default: all of candidates.py)")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--merge", type=Path, default=None,
                        help="an earlier record of this benchmark (the other device's): its rows join the table")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    return parser.parse_args(argv)


def rounding_probe() -> dict[str, Any]:
    """On the GPU: which TF32 rounding the tensor cores apply to a plain fp32 operand, and whether the
    tf32x3 emulation matches the GPU bit for bit (identity @ B: one product per output element)."""
    import numpy as np
    import torch
    import triton
    import triton.language as tl

    from kfoundry.evaluate.worker.emulated_precision import emulated_dot, tf32

    @triton.jit
    def dot16(a_ptr, b_ptr, c_ptr, DOT: tl.constexpr):
        r = tl.arange(0, 16)
        a = tl.load(a_ptr + r[:, None] * 16 + r[None, :])
        b = tl.load(b_ptr + r[:, None] * 16 + r[None, :])
        tl.store(c_ptr + r[:, None] * 16 + r[None, :], tl.dot(a, b, input_precision=DOT))

    torch.manual_seed(0)
    a = torch.eye(16, device="cuda")
    b = torch.randn(16, 16, device="cuda") * torch.logspace(-3, 3, 16, device="cuda")
    found: dict[str, Any] = {}
    for dot in ("tf32", "tf32x3", "ieee"):
        c = torch.empty(16, 16, device="cuda")
        dot16[(1,)](a, b, c, DOT=dot)
        got = c.cpu().numpy()
        bn, an = b.cpu().numpy(), a.cpu().numpy()
        zero = np.zeros((16, 16), np.float32)
        found[dot] = {
            "equals_rz": bool(np.array_equal(got, tf32(bn, "rz"))),
            "equals_rna": bool(np.array_equal(got, tf32(bn, "rna"))),
            "equals_fp32": bool(np.array_equal(got, bn)),
            "equals_emulation": bool(np.array_equal(got, emulated_dot(an, bn, zero, dot))),
            "max_rel_vs_fp32": float(np.max(np.abs(got - bn) / np.abs(bn))),
        }
    # PyTorch's own fp32 convolution and matmul on this GPU: their error against float64, beside the error
    # of the same op on TF32-rounded operands (computed in float64) -- which of the two it is closer to
    x, w = torch.randn(2, 32, 16, 16, device="cuda"), torch.randn(32, 32, 3, 3, device="cuda")
    m, k = torch.randn(128, 1024, device="cuda"), torch.randn(1024, 256, device="cuda")
    ops = {"conv2d": (torch.nn.functional.conv2d, (x, w)), "matmul": (torch.matmul, (m, k))}
    for name, (op, operands) in ops.items():
        exact = op(*(t.double() for t in operands))
        rounded = op(*(torch.from_numpy(tf32(t.cpu().numpy(), "rna")).to("cuda").double() for t in operands))
        got = op(*operands).double()
        found[f"torch_{name}"] = {"max_abs_error": float((got - exact).abs().max()),
                                  "tf32_operands_max_abs_error": float((rounded - exact).abs().max())}
    found["flags"] = {"cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
                      "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                      "float32_matmul_precision": torch.get_float32_matmul_precision(),
                      "cudnn.conv.fp32_precision": getattr(getattr(torch.backends.cudnn, "conv", None),
                                                           "fp32_precision", None)}
    return found


def judge(problem: str, device: str, dots: list[str], args: argparse.Namespace,
          folder: Path) -> list[dict[str, Any]]:
    from candidates import source

    from kfoundry.evaluate import EvalOptions, Evaluator
    from kfoundry.evaluate.parent.precision_check import describe

    options = EvalOptions(device=device, trials=args.trials, tolerance=args.tolerance, seed=args.seed,
                          baselines=(), timeout_s=600.0)
    rows = []
    with Evaluator(HERE / f"{problem}.py", options) as evaluator:
        evaluator.prepare()
        for dot in dots:
            path = folder / f"{problem}-{dot}.py"
            path.write_text(source(problem, dot))
            started = time.perf_counter()
            evaluation = evaluator.evaluate(path)
            report = evaluation.correctness
            rows.append({"problem": problem, "dot": dot, "device": device, "status": evaluation.status,
                         "e_candidate": report.error_ratio_candidate, "e_reference": report.error_ratio_reference,
                         "max_abs_error": report.max_abs_error, "precision": describe(evaluation.precision),
                         "message": evaluation.message[:300], "seconds": round(time.perf_counter() - started, 1),
                         "device_name": getattr(evaluation.device_facts, "name", None)})
            print(f"  {problem} / {dot} on {device}: {evaluation.status} ({rows[-1]['seconds']} s)",
                  file=sys.stderr, flush=True)
    return rows


def _verdict(row: dict[str, Any] | None) -> str:
    if row is None:
        return "-"
    e = "" if row["e_candidate"] is None else f" (e {row['e_candidate']:.3g} / {row['e_reference']:.3g})"
    return row["status"] + e


def table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per (problem, precision): the CPU's and the GPU's verdicts side by side."""
    lines = []
    for key in dict.fromkeys((r["problem"], r["dot"]) for r in rows):
        cpu = next((r for r in rows if (r["problem"], r["dot"]) == key and r["device"] == "cpu"), None)
        gpu = next((r for r in rows if (r["problem"], r["dot"]) == key and r["device"].startswith("cuda")), None)
        agree = None if cpu is None or gpu is None else (cpu["status"] == "ok") == (gpu["status"] == "ok")
        lines.append({"problem": key[0], "dot": key[1], "cpu": _verdict(cpu), "gpu": _verdict(gpu), "agree": agree})
    return lines


def print_table(lines: list[dict[str, Any]]) -> None:
    from kfoundry.bench.table import aligned_lines

    header = ("problem", "tl.dot", "CPU verdict (e cand / e ref)", "GPU verdict (e cand / e ref)", "agree")
    body = [[str(x["problem"]), str(x["dot"]), str(x["cpu"]), str(x["gpu"]),
             "-" if x["agree"] is None else "yes" if x["agree"] else "NO"] for x in lines]
    print("\n".join(aligned_lines(header, body)))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    sys.path.insert(0, str(HERE))
    from candidates import DOTS

    import torch
    import triton

    devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    dots = [d.strip() for d in args.dots.split(",")] if args.dots else list(DOTS)
    started = time.perf_counter()
    record: dict[str, Any] = {"benchmark": "precision_agreement",
                              "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                              "torch": torch.__version__, "triton": triton.__version__,
                              "python": platform.python_version(),
                              "settings": {"trials": args.trials, "tolerance": args.tolerance, "seed": args.seed}}
    if any(d.startswith("cuda") for d in devices):
        record["gpu"] = torch.cuda.get_device_name()
        record["tf32_rounding"] = rounding_probe()
        print(json.dumps(record["tf32_rounding"], indent=1))
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="precision-agreement-") as folder:
        for problem in [p.strip() for p in args.problems.split(",") if p.strip()]:
            for device in devices:
                rows += judge(problem, device, dots, args, Path(folder))
    if args.merge is not None:
        earlier = json.loads(args.merge.read_text())
        rows = [r for r in earlier["rows"] if r["device"] not in devices] + rows
        record["merged"] = {"file": args.merge.name, "gpu": earlier.get("gpu"), "torch": earlier.get("torch"),
                            "triton": earlier.get("triton"), "tf32_rounding": earlier.get("tf32_rounding")}
    lines = table(rows)
    print_table(lines)
    record.update(rows=rows, table=lines, total_seconds=round(time.perf_counter() - started, 1))
    args.out.mkdir(parents=True, exist_ok=True)
    gpu = record.get("gpu") or (record.get("merged") or {}).get("gpu") or ""
    where = ("h200" if "H200" in gpu else "gpu" if gpu else "") + ("+cpu" if "cpu" in devices or args.merge else "")
    out = args.out / f"precision_agreement-{where}-{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"\nwritten {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
