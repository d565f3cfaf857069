"""Print the prompt each expert would send for tests/fixtures/problems/affine.py, with real
parents evaluated on CPU (missing_tail.py: wrong output; affine_ok.py: correct), trimmed.

    python scripts/render_prompts.py [--full] [--expert NAME] [--backend triton|cuda]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from kfoundry.evaluate import EvalOptions, Evaluator  # noqa: E402
from kfoundry.experts import EXPERTS, ParentInfo, PromptContext, render  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"


def trim(text: str, head: int, tail: int) -> str:
    lines = text.splitlines()
    if len(lines) <= head + tail:
        return text
    return "\n".join(lines[:head] + [f"[... {len(lines) - head - tail} lines trimmed ...]"] + lines[-tail:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="print whole prompts")
    parser.add_argument("--expert", choices=list(EXPERTS))
    parser.add_argument("--backend", default="triton", choices=["triton", "cuda"])
    args = parser.parse_args()
    problem = FIXTURES / "problems" / "affine.py"
    options = EvalOptions(device="cpu", trials=2, seed=1)
    with Evaluator(problem, options) as evaluator:
        parents = []
        for path in (FIXTURES / "candidates" / "missing_tail.py", FIXTURES / "candidates" / "affine_ok.py"):
            parents.append(ParentInfo.from_evaluation(path.read_text(), evaluator.evaluate(path), path=str(path)))
        facts = evaluator.prepared.device_facts
    experience = [{"title": "Floor-divided grids drop the tail", "text": "Size grids with triton.cdiv(n, BLOCK).",
                   "source": "an earlier run"}]
    for name, expert in EXPERTS.items():
        if args.expert and name != args.expert:
            continue
        # repair gets the failing parent, the optimizing experts the working one, crossover both
        chosen = ([] if not expert.needs_parent else parents if name == "crossover"
                  else parents[:1] if name == "repair" else parents[1:])
        context = PromptContext(problem_source=problem.read_text(), problem_name="affine", backend=args.backend,
                                parents=chosen, device=facts, precision="fp32", tolerance=options.atol,
                                policy="strict", experience=experience, feedback=[])
        system, user = render(name, context)
        print(f"======== expert: {name} (system {len(system.splitlines())} lines, user {len(user.splitlines())} lines)")
        if name == "initializer" or args.full:
            print("--- system ---")
            print(system if args.full else trim(system, 40, 10))
        print("--- user ---")
        print(user if args.full else trim(user, 70, 15))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
