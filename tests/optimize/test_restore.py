from kfoundry.optimize.restore import stored_individuals
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
