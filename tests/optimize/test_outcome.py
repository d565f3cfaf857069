"""kfoundry.optimize.outcome: an evaluation as the search's Outcome, with the experts' ParentInfo."""

from kfoundry.experts import ParentInfo
from kfoundry.optimize.outcome import fitness, outcome, stored_outcome
from kfoundry.types import DeviceFacts, Diagnosis, Evaluation, ProblemCost, TimingReport


def _evaluation(status, speedup=None, runtime_ms=None):
    timing = TimingReport(speedup_eager=speedup, runtime_ms=runtime_ms)
    return Evaluation(status=status, message=f"{status} message", timing=timing,
                      diagnosis=Diagnosis(status=status, summary=f"{status} summary"))


def test_fitness_is_the_speedup_or_one_when_untimed():
    assert fitness(_evaluation("ok", 1.7)) == 1.7
    assert fitness(_evaluation("ok")) == 1.0
    assert fitness(_evaluation("wrong_output", 1.7)) is None


def test_the_outcome_carries_the_verdict_the_roofline_and_what_an_expert_is_shown():
    timed = _evaluation("ok", 2.0, runtime_ms=1.0)
    timed.cost = ProblemCost(flops=0, input_bytes=int(1e9), output_bytes=int(1e9), parameter_bytes=0)
    timed.device_facts = DeviceFacts(kind="cuda", name="a GPU", peak_bandwidth_gbs=4000.0)
    done = outcome(timed, "source = 1\n", "7")
    assert (done.status, done.fitness, done.diagnosis.summary) == ("ok", 2.0, "ok summary")
    assert done.roofline is not None and 0 < done.roofline <= 1  # 2 GB in 1 ms of 4 TB/s: half the roof
    assert isinstance(done.parent_info, ParentInfo) and done.parent_info.source == "source = 1\n"
    assert done.parent_info.path == "candidate 7" and "ok summary" in done.parent_info.diagnosis_markdown
    failing = outcome(_evaluation("wrong_output"), "x = 1\n", "8")
    assert failing.fitness is None and failing.roofline is None and failing.parent_info.status == "wrong_output"


def test_a_stored_evaluation_gives_the_same_outcome():
    evaluation = _evaluation("ok", 1.5)
    data = evaluation.to_dict()
    again = stored_outcome(data, data["diagnosis"], "x = 1\n", "3")
    fresh = outcome(evaluation, "x = 1\n", "3")
    assert (again.status, again.fitness, again.roofline) == (fresh.status, fresh.fitness, fresh.roofline)
    assert again.parent_info == fresh.parent_info
