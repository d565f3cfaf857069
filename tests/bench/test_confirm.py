"""kfoundry.bench.confirm: which candidates a finished run's gain compares, the gain of two timed verdicts, the
records a bench directory keeps, and a confirmation through the real evaluator on the CPU (nothing timed there).

The times below are FAKE: made up for the arithmetic, not measured anywhere."""

import json
from pathlib import Path

import pytest

from kfoundry.bench.confirm import (CONFIRM_DIR, Confirmation, Timed, candidates_to_confirm, confirm_run,
                                    confirmation_of_run, read_confirmations, write_confirmation)
from kfoundry.evaluate.parent.options import EvalOptions

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _run_dir(tmp_path: Path, first, best, candidates=()) -> Path:
    run_dir = tmp_path / "runs" / "1_affine"
    (run_dir / "candidates").mkdir(parents=True)
    (run_dir / "result.json").write_text(json.dumps({"generation0": {"candidate_id": first},
                                                     "best": {"candidate_id": best}}))
    for number, source in candidates:
        (run_dir / "candidates" / f"{number}.py").write_text(source)
    return run_dir


def test_the_gain_is_generation_zeros_time_over_the_final_bests_and_survives_a_file(tmp_path):
    timed = Confirmation(Timed(1, "ok", 1.2), Timed(9, "ok", 1.0), "FAKE GPU")
    assert timed.gain == pytest.approx(1.2)
    assert Confirmation(Timed(1, "ok", None, "not timed"), Timed(9, "ok", 1.0)).gain is None
    assert Confirmation(Timed(1, "ok", 1.2), Timed(9, "wrong_output", 1.0)).gain is None
    write_confirmation(tmp_path, "1_a", timed)
    (tmp_path / CONFIRM_DIR / "2_b.json").write_text('{"generation0": ')  # cut short by a kill: confirmed again
    found = read_confirmations(tmp_path)
    assert list(found) == ["1_a"] and found["1_a"] == timed
    assert json.loads((tmp_path / CONFIRM_DIR / "1_a.json").read_text())["gain"] == pytest.approx(1.2)
    assert read_confirmations(tmp_path / "nowhere") == {}


def test_a_runs_own_second_timing_is_read_from_its_result(tmp_path):
    """optimize's time_again writes result.json's timed_again; a run without it (older, or on the CPU) has none."""
    run_dir = _run_dir(tmp_path, 1, 7)
    assert confirmation_of_run(run_dir) is None and confirmation_of_run(tmp_path / "no-run") is None
    timed = Confirmation(Timed(1, "ok", 1.2), Timed(7, "ok", 1.0), "FAKE GPU")
    result = json.loads((run_dir / "result.json").read_text())
    (run_dir / "result.json").write_text(json.dumps({**result, "timed_again": timed.to_dict()}))
    assert confirmation_of_run(run_dir) == timed


def test_a_run_whose_best_is_generation_zeros_needs_no_confirmation(tmp_path):
    assert candidates_to_confirm(_run_dir(tmp_path, 3, 3)) is None
    assert candidates_to_confirm(tmp_path / "no-run") is None
    assert candidates_to_confirm(_run_dir(tmp_path / "x", 1, 7)) == (1, 7)


def test_both_candidates_are_judged_again_by_one_evaluator(tmp_path):
    """On the CPU both verdicts come back correct and untimed: the gain is not measured, and the record says why."""
    correct = (FIXTURES / "candidates" / "affine_ok.py").read_text()
    run_dir = _run_dir(tmp_path, 1, 2, [(1, correct), (2, correct + "\n# the final best\n")])
    options = EvalOptions(device="cpu", trials=1, seed=5, timeout_s=120, guard=False)
    confirmation = confirm_run(run_dir, FIXTURES / "problems" / "affine.py", options)
    assert [t.candidate for t in (confirmation.generation0, confirmation.final)] == [1, 2]
    assert confirmation.generation0.status == "ok" and confirmation.final.status == "ok"
    assert confirmation.gain is None and confirmation.final.ms is None and confirmation.final.message
