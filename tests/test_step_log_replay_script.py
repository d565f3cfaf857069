"""benchmarks/step_log_replay.py over a run store written here with the real RunStore, run as a real process.

Every number below is FAKE: made up for the arithmetic, not measured anywhere."""

import json
import subprocess
import sys
import time
from pathlib import Path

from kfoundry.runs.store import RunStore

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "benchmarks" / "step_log_replay.py"
BK = {"gemm_0.BK": [32, 64]}


def _run_store(run_dir: Path, problem: Path) -> None:
    """A parent at 2.0x; two recompose children that took BK 32 -> 64 and were judged (wrong, then 0.5x); then a
    third that takes it again (1.0x) and a fourth that does not (2.2x, a new best)."""
    with RunStore.create(run_dir, problem, {}, seed=0) as store:
        def judged(expert, parents, speed, status="ok", move=None):
            cid = store.add_candidate(f"# {expert} {time.perf_counter_ns()}", parents, expert, 0, 1,
                                      "template" if expert == "composer" else "tuner")
            if move is not None:
                store.event("move", candidate_id=cid, expert=expert, move={"kind": "config", "changed": move})
            eid = store.start_evaluation(cid)
            store.finish_evaluation(eid, {"status": status, "message": "",
                                          "timing": {"speedup_eager": speed if status == "ok" else None}})
            return cid

        parent = judged("composer", [], 2.0)
        judged("recompose", [parent], None, status="wrong_output", move=dict(BK, **{"gemm_0.BM": [128, 64]}))
        judged("recompose", [parent], 1.0, move=dict(BK, **{"gemm_0.BN": [128, 64]}))
        judged("recompose", [parent], 1.0, move=BK)
        judged("recompose", [parent], 2.2, move={"graph": [False, True]})


def test_children_that_take_a_harmful_step_are_counted(tmp_path):
    problem = tmp_path / "problem.py"
    problem.write_text("# a problem\n")
    _run_store(tmp_path / "bench" / "runs" / "1_fake", problem)
    out = tmp_path / "replay.json"
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "bench"), "--json", str(out)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    [run] = json.loads(out.read_text())["runs"]
    assert run["recompose_children"] == 4 and run["deferred_beat_best"] == 0
    assert [(d["status"], d["speedup_eager"], d["best_before"]) for d in run["deferred"]] == [("ok", 1.0, 2.0)]
    assert "1 of 4 recompose children took a step already harmful; 0 of them beat their run's best" in done.stdout


def test_a_directory_without_a_run_store_is_a_usage_error(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    assert done.returncode == 2 and "no run store" in done.stderr
