"""Print what an optimize run did: per generation (evaluations, correct, best speedup so far), the
lineage of the best candidate, and how it stopped. Reads RUN_DIR/result.json and history.json.

    python scripts/run_summary.py RUN_DIR
"""

import json
import sys
from pathlib import Path


def fmt(x, unit="x"):
    return "-" if x is None else f"{x:.3f}{unit}"


def main(run_dir: Path) -> int:
    result = json.loads((run_dir / "result.json").read_text())
    history = json.loads((run_dir / "history.json").read_text())
    device = result.get("device") or {}
    versions = result.get("versions") or {}
    print(f"run {run_dir.name}: {result['problem']['name']} on {device.get('name') or device.get('device')}; "
          f"torch {versions.get('torch')}, triton {versions.get('triton')}")
    print(f"stopped: {result.get('stop_reason')}; {result['evaluations']} evaluations, {result['correct']} correct, "
          f"LLM calls {result['llm']['llm_calls']}, wall {result.get('wall_time_s') or 0:.0f} s")
    print(f"{'gen':>4} {'evals':>6} {'correct':>8} {'best in gen':>12} {'best so far':>12} {'vs compile':>11}")
    for row in history:
        print(f"{row['generation']:>4} {row['evaluations']:>6} {row['correct']:>8} {fmt(row['best_speedup_eager']):>12}"
              f" {fmt(row['best_speedup_eager_so_far']):>12} {fmt(row['best_speedup_compile_so_far']):>11}")
    best = result.get("best")
    if best:
        timing = best.get("timing") or {}
        print(f"best: candidate {best['candidate_id']} ({best['expert']}), {fmt(best['runtime_ms'], ' ms')} vs eager "
              f"{fmt(best['eager_ms'], ' ms')} = {fmt(best['speedup_eager'])}, vs torch.compile "
              f"{fmt(best['speedup_compile'])} ({timing.get('statistic')} of {timing.get('trials')} trials)")
    print("lineage of the best (nearest first):")
    for step in result.get("lineage") or []:
        print("  " + ", ".join(f"{k}={v}" for k, v in step.items() if k in
                               ("id", "expert", "origin", "island", "generation", "speedup_eager", "status")))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
