"""The optimize method's reading of a run's result.json (apply_run_result)."""

from kfoundry.bench.methods import apply_run_result
from kfoundry.bench.results import ProblemResult


def _problem() -> ProblemResult:
    return ProblemResult(status="error", name="1_a", path="1_a.py", number=1, method="optimize", fingerprint="f")


def test_the_generation0_best_and_the_gain_come_from_result_json():
    record = {"best": {"speedup_eager": 1.8}, "evaluations": 6, "correct": 5, "statuses": {"ok": 5},
              "generation0": {"candidate_id": 1, "expert": "initializer", "speedup_eager": 1.2},
              "improvements": [], "gain_over_generation0": 1.5}
    result = _problem()
    apply_run_result(result, record)
    assert (result.status, result.speedup_eager) == ("ok", 1.8)
    assert result.generation0_speedup == 1.2 and result.gain_over_generation0 == 1.5


def test_a_result_json_without_them_leaves_them_empty():
    for record in ({"best": {"speedup_eager": 1.8}, "evaluations": 1, "correct": 1},  # written before the fields
                   {"best": None, "evaluations": 1, "correct": 0, "generation0": None, "gain_over_generation0": None}):
        result = _problem()
        apply_run_result(result, record)
        assert result.generation0_speedup is None and result.gain_over_generation0 is None
