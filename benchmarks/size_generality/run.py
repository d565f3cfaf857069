"""Check small on the CPU, judge large on a GPU: do composer candidates hold at sizes they were not composed at?

The workflow of `--set` (docs/commands.md: check small on the CPU, time large on a GPU), as a user runs it. On a CPU
machine (`--stage cpu`): compose each problem at small --set sizes (SMALL below) and judge every candidate there
with the evaluator (Triton's interpreter, the GPU's dot precision emulated), then judge it again at a second small
size set (kfoundry.evaluate.parent.size_check, as `eval --check-sizes` does). The record keeps each candidate's source. On
a GPU machine (`--stage gpu --merge CPU_RECORD.json`): judge the same sources at the problem files' own sizes.
Prints one table (problem, candidate, CPU verdict at the composed sizes, at the second set, GPU verdict at the
file's sizes, and whether the CPU's verdicts foretold the GPU's) and writes JSON.

    python benchmarks/size_generality/run.py --stage cpu [--variants 4] [--out benchmarks/results]
    python benchmarks/size_generality/run.py --stage gpu --merge benchmarks/results/size_generality-cpu-*.json
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

ROOT = Path(__file__).resolve().parent.parent.parent
CONV = {"batch_size": 2, "in_channels": 8, "out_channels": 16}  # conv_suite's small convolutions
# problem -> the small sizes a CPU run composes and checks it at
SMALL = {
    "benchmarks/suite/17_conv2d_groupnorm.py":
        {"batch_size": 2, "in_channels": 4, "out_channels": 16, "height": 8, "width": 8, "num_groups": 4},
    "benchmarks/gemm_suite/4_linear_groupnorm_hardtanh.py": {"batch_size": 16, "in_features": 64, "out_features": 64},
    "benchmarks/suite/16_conv2d_batchnorm_relu.py":
        {"batch_size": 2, "in_channels": 4, "out_channels": 16, "height": 8, "width": 8},
    "benchmarks/suite/23_affine_relu_maxpool2d.py": {"batch_size": 2, "in_channels": 8, "height": 12, "width": 12},
    "benchmarks/suite/4_linear_epilogue.py": {"batch_size": 32, "in_features": 64, "out_features": 48},
    "benchmarks/suite/3_layernorm.py": {"batch_size": 16, "dim": 96},
    # conv_suite's convolutions before norms, poolings and channel reductions (8 input channels: the dot templates)
    "benchmarks/conv_suite/14_conv2d_groupnorm_scale_maxpool_clamp.py":
        {**CONV, "height": 14, "width": 14, "num_groups": 4},
    "benchmarks/conv_suite/15_conv_transpose2d_batchnorm_tanh_maxpool_groupnorm.py":
        {**CONV, "height": 6, "width": 6, "num_groups": 4},
    "benchmarks/conv_suite/16_conv_transpose2d_subtract_bias_tanh.py":
        {**CONV, "height": 6, "width": 6},
    "benchmarks/conv_suite/17_conv3d_groupnorm_mean.py":
        {**CONV, "depth": 4, "height": 6, "width": 6, "num_groups": 4},
    "benchmarks/conv_suite/18_conv_transpose2d_gelu_groupnorm.py":
        {**CONV, "height": 6, "width": 6, "num_groups": 4},
    "benchmarks/conv_suite/19_conv_transpose3d_sum_channels_residual.py":
        {"batch_size": 2, "in_channels": 8, "out_channels": 8, "depth": 3, "height": 4, "width": 4},
    "benchmarks/conv_suite/20_conv2d_instancenorm_avgpool_relu.py":
        {**CONV, "height": 10, "width": 10},
    "benchmarks/conv_suite/21_conv2d_scale_min_channels.py":
        {**CONV, "height": 8, "width": 8},
    "benchmarks/conv_suite/22_conv3d_batchnorm_max_channels_sigmoid.py":
        {**CONV, "depth": 4, "height": 6, "width": 6},
    "benchmarks/conv_suite/23_depthwise_conv2d_groupnorm_silu.py":
        {"batch_size": 2, "channels": 16, "height": 10, "width": 10, "num_groups": 4},
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", choices=("cpu", "gpu"), required=True)
    parser.add_argument("--merge", type=Path, default=None, help="the cpu stage's record (the gpu stage judges it)")
    parser.add_argument("--problems", default=None, help="comma-separated paths (default: all of SMALL; the gpu "
                                                         "stage: all of the record's)")
    parser.add_argument("--variants", type=int, default=4, help="composer candidates per problem")
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per GPU evaluation")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    return parser.parse_args(argv)


def _verdict(evaluation) -> dict[str, Any]:
    first = (evaluation.message or "").strip().splitlines()
    return {"status": evaluation.status, "message": first[0][:300] if first else "",
            "e_candidate": evaluation.correctness.error_ratio_candidate}


def cpu_stage(args: argparse.Namespace, problems: list[str], folder: Path) -> list[dict[str, Any]]:
    from kfoundry.evaluate import EvalOptions, Evaluator
    from kfoundry.evaluate.parent.size_check import check_sizes
    from kfoundry.experts.composer import compose
    from kfoundry.types import to_jsonable

    rows = []
    for problem in problems:
        small = SMALL[problem]
        started = time.perf_counter()
        composed = compose(ROOT / problem, set_values=small, max_variants=args.variants, tolerance=1e-4)
        print(f"{problem}: {composed.message} ({time.perf_counter() - started:.1f} s)", file=sys.stderr, flush=True)
        options = EvalOptions(device="cpu", trials=args.trials, seed=args.seed, baselines=(), set_values=small)
        with Evaluator(ROOT / problem, options) as evaluator:
            for candidate in composed.candidates:
                path = folder / f"{Path(problem).stem}-{candidate.name}.py"
                path.write_text(candidate.source)
                row = {"problem": problem, "candidate": candidate.name, "small": small, "source": candidate.source,
                       "cpu": _verdict(evaluator.evaluate(path))}
                if row["cpu"]["status"] == "ok":
                    row["cpu_other_sizes"] = to_jsonable(check_sizes(ROOT / problem, path, options))
                print(f"  {candidate.name}: {row['cpu']['status']}; "
                      f"{(row.get('cpu_other_sizes') or {}).get('holds', '-')}", file=sys.stderr, flush=True)
                rows.append(row)
    return rows


def gpu_stage(args: argparse.Namespace, rows: list[dict[str, Any]], folder: Path) -> None:
    from kfoundry.evaluate import EvalOptions, Evaluator

    options = EvalOptions(device="cuda", trials=args.trials, seed=args.seed, baselines=("eager",), timing_trials=20,
                          timing_budget_s=2.0, timeout_s=args.timeout)
    for problem in dict.fromkeys(r["problem"] for r in rows):
        with Evaluator(ROOT / problem, options) as evaluator:
            for row in (r for r in rows if r["problem"] == problem):
                path = folder / f"{Path(problem).stem}-{row['candidate']}.py"
                path.write_text(row["source"])
                evaluation = evaluator.evaluate(path)
                row["gpu"] = _verdict(evaluation)
                row["gpu"]["speedup_eager"] = evaluation.timing.speedup_eager
                print(f"  {problem} / {row['candidate']}: {row['gpu']['status']}", file=sys.stderr, flush=True)


def _foretold(row: dict[str, Any]) -> str:
    gpu = row.get("gpu")
    if gpu is None:
        return "-"
    cpu_says_ok = row["cpu"]["status"] == "ok" and (row.get("cpu_other_sizes") or {}).get("holds") is True
    return "yes" if cpu_says_ok == (gpu["status"] == "ok") else "NO"


def print_table(rows: list[dict[str, Any]]) -> None:
    from kfoundry.bench.table import aligned_lines

    header = ("problem", "candidate", "CPU, composed sizes", "CPU, other sizes", "GPU, file's sizes", "foretold")
    body = []
    for r in rows:
        other = r.get("cpu_other_sizes") or {}
        body.append([Path(r["problem"]).stem, r["candidate"][:44], r["cpu"]["status"],
                     "-" if other.get("holds") is None else "holds" if other["holds"] else other.get("status", "no"),
                     (r.get("gpu") or {}).get("status", "-"), _foretold(r)])
    print("\n".join(aligned_lines(header, body)))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    import torch
    import triton

    started = time.perf_counter()
    record: dict[str, Any] = {"benchmark": "size_generality", "stage": args.stage,
                              "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                              "python": platform.python_version(), "torch": torch.__version__,
                              "triton": triton.__version__, "settings": {"trials": args.trials, "seed": args.seed,
                                                                          "variants": args.variants}}
    with tempfile.TemporaryDirectory(prefix="size-generality-") as folder:
        if args.stage == "cpu":
            problems = args.problems.split(",") if args.problems else list(SMALL)
            rows = cpu_stage(args, problems, Path(folder))
        else:
            if args.merge is None:
                raise SystemExit("--stage gpu judges a cpu stage's record: give it with --merge")
            earlier = json.loads(args.merge.read_text())
            rows = [r for r in earlier["rows"] if not args.problems or r["problem"] in args.problems.split(",")]
            record["cpu_record"] = {"file": args.merge.name, "torch": earlier.get("torch"),
                                    "triton": earlier.get("triton"), "date": earlier.get("date")}
            record["gpu"] = torch.cuda.get_device_name()
            gpu_stage(args, rows, Path(folder))
    print_table(rows)
    record.update(rows=rows, total_seconds=round(time.perf_counter() - started, 1))
    args.out.mkdir(parents=True, exist_ok=True)
    where = "cpu" if args.stage == "cpu" else ("h200" if "H200" in record["gpu"] else "gpu")
    out = args.out / f"size_generality-{where}-{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}.json"
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"\nwritten {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
