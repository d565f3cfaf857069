from kfoundry.optimize.restore import stored_individuals, verdicts_missing_baselines
from kfoundry.runs import RunStore
from kfoundry.types import Diagnosis


def _evaluation(status, speedup=None):
    return {"status": status, "message": f"{status} message", "timing": {"speedup_eager": speedup},
            "correctness": {"max_abs_error": 0.5 if status == "wrong_output" else None},
            "diagnosis": Diagnosis(status=status, summary=f"{status} summary").to_dict()}


def test_the_stores_candidates_come_back_as_individuals(tmp_path):
    problem = tmp_path / "p.py"
    problem.write_text("x = 1\n")
    with RunStore.create(tmp_path / "run", problem, {}, seed=0) as store:
        a = store.add_candidate("a = 1\n", [], "initializer", 0, 0, "llm")
        store.finish_evaluation(store.start_evaluation(a), _evaluation("ok", 1.3))
        b = store.add_candidate("b = 1\n", [a], "memory", 1, 1, "llm")
        store.finish_evaluation(store.start_evaluation(b), _evaluation("wrong_output"))
        c = store.add_candidate("c = 1\n", [b], "repair", 1, 2, "llm")
        store.start_evaluation(c)  # in flight when the run stopped
        individuals, evaluations = stored_individuals(store)
    assert [i.status for i in individuals.values()] == ["ok", "wrong_output", "pending"]
    assert individuals[str(a)].fitness == 1.3 and individuals[str(b)].parent_ids == [str(a)]
    assert individuals[str(b)].diagnosis.summary == "wrong_output summary" and str(c) not in evaluations
    info = individuals[str(b)].parent_info  # what an expert is shown of it as a parent
    assert info.path == f"candidate {b}" and info.message == "wrong_output message"
    assert info.status == "wrong_output" and info.max_abs_error == 0.5 and "wrong_output summary" in info.diagnosis_markdown


def _timed(pending, device="NVIDIA H100 80GB HBM3"):
    stats = {"median_ms": 0.84, "q1_ms": 0.83, "q3_ms": 0.85, "min_ms": 0.8, "max_ms": 5.4, "trials": 100}
    return dict(_evaluation("ok", 2.0), device="cuda:0", timing={
        "runtime_ms": 0.84, "device": device, "candidate": stats, "baselines_pending": pending,
        "baselines": {"eager": dict(stats, median_ms=1.75)}, "eager_ms": 1.75, "speedup_eager": 2.08})


def test_a_resumed_run_completes_the_baselines_its_stopped_session_left_pending(tmp_path):
    problem = tmp_path / "p.py"
    problem.write_text("x = 1\n")
    with RunStore.create(tmp_path / "run", problem, {}, seed=0) as store:
        ids = {}
        for name, evaluation in [("early", _timed(["compile", "compile-max-autotune-no-cudagraphs"])),
                                 ("complete", _timed([])), ("elsewhere", _timed(["compile"], device="NVIDIA A100")),
                                 ("untimed", _evaluation("wrong_output"))]:
            cid = store.add_candidate(f"{name} = 1\n", [], "initializer", 0, 0, "template")
            ids[name] = (cid, store.start_evaluation(cid))
            store.finish_evaluation(ids[name][1], evaluation)
        _, evaluations = stored_individuals(store)
    found = verdicts_missing_baselines(evaluations, "NVIDIA H100 80GB HBM3")
    early_cid, early_eval = ids["early"]
    assert list(found) == [str(early_cid)]  # not the complete one, nor one timed on another device, nor untimed
    eval_id, evaluation = found[str(early_cid)]
    assert eval_id == early_eval
    assert evaluation.timing.baselines_pending == ["compile", "compile-max-autotune-no-cudagraphs"]
    assert evaluation.timing.candidate.median_ms == 0.84
    assert verdicts_missing_baselines(evaluations, None) == {}
