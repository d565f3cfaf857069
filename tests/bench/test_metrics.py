"""Suite metrics against values computed by hand."""

import math

import pytest

from kfoundry.bench import metrics as m

# eager, compile speedups; C failed; E's reference failed (a failure too, counted apart as well)
OUTCOMES = [
    {"status": "ok", "speedup_eager": 2.0, "speedup_compile": 1.5},  # A
    {"status": "ok", "speedup_eager": 0.5, "speedup_compile": 0.25},  # B
    {"status": "wrong_output", "speedup_eager": None, "speedup_compile": None},  # C
    {"status": "ok", "speedup_eager": 1.3, "speedup_compile": 1.0},  # D
    {"status": "problem_error", "speedup_eager": None, "speedup_compile": None},  # E
]
JUDGED = OUTCOMES[:4]


def test_correctness_rate():
    assert m.correctness_rate(JUDGED) == 0.75
    assert m.correctness_rate([]) is None


@pytest.mark.parametrize("p, eager, compile_", [
    (0, 0.75, 0.75),  # A, B, D are correct and faster than 0x
    (0.5, 0.5, 0.5),  # A, D (B is exactly 0.5x vs eager: not more); vs compile A, D
    (0.8, 0.5, 0.5),
    (1, 0.5, 0.25),  # A, D vs eager; vs compile only A (D is exactly 1.0x: not more than 1)
    (1.2, 0.5, 0.25),
    (1.5, 0.25, 0.0),  # A vs eager; vs compile A is exactly 1.5x: not more
    (2, 0.0, 0.0),  # A is exactly 2.0x: not more than 2
])
def test_fast_p(p, eager, compile_):
    assert m.fast_p(JUDGED, p) == eager
    assert m.fast_p(JUDGED, p, "speedup_compile") == compile_


def test_geomeans():
    assert m.geomean_correct(JUDGED) == pytest.approx(1.3 ** (1 / 3))  # (2 * 0.5 * 1.3)^(1/3)
    assert m.geomean_all(JUDGED) == pytest.approx(1.3 ** (1 / 4))  # C counted as 1.0
    assert m.geomean_correct(JUDGED, "speedup_compile") == pytest.approx(0.375 ** (1 / 3))
    assert m.geomean_all(JUDGED, "speedup_compile") == pytest.approx(0.375 ** (1 / 4))


def test_summary_counts_problems_whose_reference_failed_as_failures():
    summary = m.summarize(OUTCOMES)
    assert summary["problems"] == 5 and summary["unjudged"] == 1 and summary["correct"] == 3
    assert summary["correctness_rate"] == 0.6  # 3 of 5: an unloadable problem does not raise the score
    assert summary["eager"]["fast_p"] == {"0": 0.6, "0.5": 0.4, "0.8": 0.4, "1": 0.4, "1.2": 0.4, "1.5": 0.2,
                                          "2": 0.0}
    assert summary["eager"]["geomean_all"] == pytest.approx(1.3 ** 0.2)  # C and E counted as 1.0
    assert summary["eager"]["geomean_correct"] == pytest.approx(1.3 ** (1 / 3))
    assert summary["compile"]["timed_correct"] == 3 and summary["compile"]["untimed_correct"] == 0


def test_untimed_figures_are_none_never_zero():
    untimed = [{"status": "ok", "speedup_eager": None}, {"status": "ok", "speedup_eager": None},
               {"status": "crash", "speedup_eager": None}]
    assert m.correctness_rate(untimed) == pytest.approx(2 / 3)
    assert all(m.fast_p(untimed, p) is None for p in m.FAST_P)
    assert m.geomean_correct(untimed) is None and m.geomean_all(untimed) is None


def test_all_failed():
    failed = [{"status": "wrong_output"}, {"status": "timeout"}]
    assert m.fast_p(failed, 0) == 0.0  # a failed problem is never fast: known without timing
    assert m.geomean_correct(failed) is None
    assert m.geomean_all(failed) == 1.0  # every problem counted as the reference


def test_a_correct_problem_without_a_time_is_not_fast_and_is_counted_apart():
    mixed = [{"status": "ok", "speedup_eager": 3.0}, {"status": "ok", "speedup_eager": None}]
    assert m.fast_p(mixed, 1) == 0.5
    assert m.geomean_correct(mixed) == pytest.approx(3.0)
    assert m.summarize(mixed)["eager"]["untimed_correct"] == 1


def test_bad_speedup_values_are_not_speedups():
    odd = [{"status": "ok", "speedup_eager": math.nan}, {"status": "ok", "speedup_eager": 0.0}]
    assert m.geomean_correct(odd) is None


def test_out_of_resource_counts_per_problem_and_in_total():
    message = "kernel compilation failed: out of resource: shared memory, Required: 262144, Hardware limit: 232448."
    assert m.is_out_of_resource("compile_error", message)
    assert not m.is_out_of_resource("runtime_error", message) and not m.is_out_of_resource("compile_error", "x")
    outcomes = [dict(o, out_of_resource=n) for o, n in zip(JUDGED, (0, 2, None, 1))]
    assert m.summarize(outcomes)["out_of_resource"] == 3
    assert m.summarize(JUDGED)["out_of_resource"] is None  # no search ran: not counted, not 0
