"""One forward of a problem's Model and of a candidate's ModelNew between cudaProfilerStart and Stop, for
Nsight Compute: what each kernel of both costs, side by side (the per-kernel view behind a bench's totals).

    ncu --profile-from-start off --set full --page details python benchmarks/ncu_forward.py PROBLEM CANDIDATE

Both are built from the same seed and run twice first (Triton compiles, cuDNN picks its algorithms); then the
reference's forward and the candidate's forward run once each inside the profiled range, with an NVTX range
named "reference" or "candidate" around each. Runs the composed code in this process: for trusted candidates
(our own bench's best.py files) only. Prints the largest absolute difference of the two outputs.

    python benchmarks/ncu_forward.py --summarize NCU_DETAILS.txt [--json OUT.json]

reads what `ncu --page details` printed and gives one row per kernel: duration, registers, achieved occupancy,
issued instructions, DRAM and SM throughput (the kernels in launch order: the reference's, then ours).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

METRICS = {"Duration": "duration_us", "Registers Per Thread": "registers", "Achieved Occupancy": "occupancy_pct",
           "Issued Instructions": "issued_instructions", "DRAM Throughput": "dram_pct",
           "Compute (SM) Throughput": "sm_pct"}
TO_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}


def load(path: Path, name: str):
    """The module of a problem file (its folder on sys.path first, as for optimize: its own imports load) or of a
    candidate file."""
    from kfoundry.problem import load_module, load_problem_module, read_problem

    if name.endswith("problem"):
        return load_problem_module(read_problem(path))
    return load_module(path, path.read_text(), name)


def summarize(text: str) -> list[dict]:
    """One record per kernel of an `ncu --page details` text: its name and METRICS (numbers)."""
    kernels: list[dict] = []
    for line in text.splitlines():
        if re.match(r"  \S.*\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\), Context", line):
            kernels.append({"kernel": line.strip().split("(")[0].strip()[:120],
                            "launch": re.search(r"\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)", line).group(0)})
            continue
        parts = line.split()
        if kernels and len(parts) >= 2:
            for label, key in METRICS.items():
                if line.strip().startswith(label + " ") and key not in kernels[-1]:
                    try:
                        value = float(parts[-1].replace(",", ""))
                    except ValueError:
                        continue
                    kernels[-1][key] = value * TO_US.get(parts[-2], 1.0) if key == "duration_us" else value
    return kernels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problem", type=Path, nargs="?")
    parser.add_argument("candidate", type=Path, nargs="?")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--summarize", type=Path, help="an `ncu --page details` text to summarize instead")
    parser.add_argument("--json", type=Path, help="with --summarize: also write the rows here")
    args = parser.parse_args()
    if args.summarize:
        rows = summarize(args.summarize.read_text())
        for row in rows:
            print(f"{row.get('duration_us', float('nan')):9.2f} us  regs {row.get('registers', 0):4.0f}  "
                  f"occ {row.get('occupancy_pct', 0):5.1f}%  dram {row.get('dram_pct', 0):5.1f}%  "
                  f"sm {row.get('sm_pct', 0):5.1f}%  {row['kernel'][:70]}")
        if args.json:
            args.json.write_text(json.dumps({"source": str(args.summarize), "kernels": rows}, indent=1))
        return
    if args.problem is None or args.candidate is None:
        parser.error("PROBLEM and CANDIDATE are required (or --summarize)")
    import torch
    problem, candidate = load(args.problem, "ncu_problem"), load(args.candidate, "ncu_candidate")
    torch.manual_seed(0)
    reference = problem.Model(*problem.get_init_inputs()).cuda()
    torch.manual_seed(0)
    ours = candidate.ModelNew(*problem.get_init_inputs()).cuda()
    torch.manual_seed(1)
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
    with torch.no_grad():
        for _ in range(args.warmup):
            reference(*inputs)
            ours(*inputs)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        for label, model in (("reference", reference), ("candidate", ours)):
            torch.cuda.nvtx.range_push(label)
            out = model(*inputs)
            torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()
            if label == "reference":
                expected = out
        torch.cuda.cudart().cudaProfilerStop()
    print(f"max |candidate - reference| = {(out - expected).abs().max().item():.3e}")


if __name__ == "__main__":
    main()
