"""Print the markdown diagnosis of broken kernels (CPU) or of the working examples (GPU).

    python scripts/diagnose_showcase.py broken            # CPU: the fixtures' broken kernels
    python scripts/diagnose_showcase.py working [--ncu]   # GPU: the examples at full size
    python scripts/diagnose_showcase.py sanitize          # GPU: an out-of-bounds read under memcheck

Writes each diagnosis as JSON too when --out DIR is given.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from kfoundry.diagnose import render_markdown  # noqa: E402
from kfoundry.evaluate import EvalOptions, Evaluator  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
AFFINE = FIXTURES / "problems" / "affine.py"
EXAMPLES = ROOT / "examples"

BROKEN = [  # (problem, candidate, --set values)
    (AFFINE, FIXTURES / "candidates" / "missing_tail.py", {}),
    (AFFINE, FIXTURES / "candidates" / "wrong_constant.py", {}),
    (AFFINE, FIXTURES / "candidates" / "bad_mask.py", {}),
    (AFFINE, FIXTURES / "candidates" / "triton_not_pow2.py", {}),
    (AFFINE, FIXTURES / "diagnose" / "error_store_pointer.py", {}),
    (AFFINE, FIXTURES / "diagnose" / "unseeded_noise.py", {}),
    (AFFINE, FIXTURES / "diagnose" / "error_oob_segfault.py", {}),
    (AFFINE, FIXTURES / "guard" / "cheat_torch_compute.py", {}),
]
WORKING = ["pointwise_chain", "row_softmax", "linear_epilogue", "conv_relu", "layernorm"]


def show(problem: Path, candidate: Path, options: EvalOptions, out: Path | None) -> None:
    started = time.monotonic()
    with Evaluator(problem, options) as evaluator:
        evaluation = evaluator.evaluate(candidate)
    name = f"{problem.parent.name if problem.name == 'problem.py' else problem.stem} / {candidate.name}"
    print(f"#### {name} ({time.monotonic() - started:.0f} s)\n")
    print(render_markdown(evaluation.diagnosis))
    print()
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        stem = problem.parent.name if problem.name == "problem.py" else candidate.stem
        (out / f"{stem}.json").write_text(json.dumps(evaluation.to_dict(), indent=1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", choices=["broken", "working", "sanitize"])
    parser.add_argument("--ncu", action="store_true", help="working: add Nsight Compute's view")
    parser.add_argument("--examples", default=",".join(WORKING))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.which == "broken":
        for problem, candidate, values in BROKEN:
            show(problem, candidate, EvalOptions(device="cpu", trials=2, seed=1, set_values=values, timeout_s=120),
                 args.out)
    elif args.which == "working":
        for name in args.examples.split(","):
            options = EvalOptions(device="cuda", trials=2, seed=1, ncu=args.ncu, timing_trials=50)
            show(EXAMPLES / name / "problem.py", EXAMPLES / name / "kernel.py", options, args.out)
    else:
        options = EvalOptions(device="cuda", trials=2, seed=1, sanitize=True, guard=False, baselines=("eager",))
        show(AFFINE, FIXTURES / "diagnose" / "error_oob_segfault.py", options, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
