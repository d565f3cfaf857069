"""The shared value types: from_dict is the inverse of to_dict (evaluations cross process and machine
boundaries as dicts, see kfoundry.distributed)."""

import json

from kfoundry.types import (
    CorrectnessReport,
    DeviceFacts,
    Diagnosis,
    DiagnosticFinding,
    Evaluation,
    ProblemCost,
    SourceLocation,
    TimingReport,
    TimingStats,
)


def _stats(median: float) -> TimingStats:
    return TimingStats(median_ms=median, q1_ms=median * 0.9, q3_ms=median * 1.1, min_ms=median * 0.8,
                       max_ms=median * 1.5, trials=100, event_median_ms=median, sm_clock_mhz=[1980, None])


def _gpu_evaluation() -> Evaluation:
    return Evaluation(
        status="ok", message="correct", phase="timing", problem="/p/problem.py", candidate="/p/c.py", device="cuda:1",
        correctness=CorrectnessReport(trials=5, trials_passed=5, seeds=[1, 2], init_seed=3, tolerance=1e-4,
                                      max_abs_error=1e-6, first_bad_index=None),
        timing=TimingReport(runtime_ms=0.5, eager_ms=1.0, speedup_eager=2.0, trials=100, device="NVIDIA H200",
                            device_uuid="GPU-1234", candidate=_stats(0.5),
                            baselines={"eager": _stats(1.0), "compile": None}, baseline_errors={"compile": "boom"}),
        cost=ProblemCost(flops=10, input_bytes=4, output_bytes=4, parameter_bytes=0),
        device_facts=DeviceFacts(kind="cuda", name="NVIDIA H200", uuid="GPU-1234", sm_count=132,
                                 peak_tflops={"fp32": 67.0}, source="measured"),
        warnings=["w"], settings={"seed": 7, "baselines": ["eager"]}, durations_s={"load_s": 0.5},
        profile={"kernels": [{"name": "k", "time_ms": 0.4}]},
        diagnosis=Diagnosis(status="ok", summary="fast", focus="memory", bound="memory", findings=[
            DiagnosticFinding(category="roofline", severity="info", title="t", evidence=["e"],
                              location=SourceLocation(file="/p/c.py", line=3), data={"fraction": 0.5})]),
    )


def test_evaluation_from_dict_inverts_to_dict():
    evaluation = _gpu_evaluation()
    data = json.loads(json.dumps(evaluation.to_dict()))
    again = Evaluation.from_dict(data)
    assert again == evaluation
    assert isinstance(again.timing.candidate, TimingStats) and again.timing.baselines["compile"] is None
    assert again.to_dict() == evaluation.to_dict()


def test_from_dict_takes_a_minimal_record_and_ignores_unknown_fields():
    again = Evaluation.from_dict({"status": "crash", "message": "lost", "from_a_newer_version": 1,
                                  "timing": {"reason": "no", "new_field": 2}})
    assert again.status == "crash" and again.timing.reason == "no"
    assert again.correctness == CorrectnessReport() and again.cost is None and again.diagnosis is None


def test_a_real_evaluation_survives_the_round_trip(affine_eval):
    evaluation = affine_eval("bad_mask.py")
    data = json.loads(json.dumps(evaluation.to_dict()))
    assert Evaluation.from_dict(data).to_dict() == data
