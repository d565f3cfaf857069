from kfoundry.experts.context import ParentInfo
from kfoundry.library import Library
from kfoundry.optimize.experience import Experience, same_problem
from kfoundry.search.individual import Individual
from kfoundry.types import DiagnosticFinding, Diagnosis

SIG = {"kind": "pointwise", "ops": ["aten.mul", "aten.add"], "inputs": [{"shape": [4, 8]}], "outputs": [],
       "parameters": [], "text": "pointwise mul add"}


def test_same_problem_needs_the_same_ops_and_shapes():
    assert same_problem(SIG, dict(SIG))
    assert not same_problem(SIG, {**SIG, "inputs": [{"shape": [8, 8]}]})
    assert not same_problem({}, SIG)


def test_steps_are_recorded_with_the_parents_diagnosis_and_the_best_kernel_is_kept(tmp_path):
    library = Library(tmp_path / "lib.sqlite")
    experience = Experience(library, SIG, "run-a", "NVIDIA H200")
    diagnosis = Diagnosis(status="ok", summary="", findings=[
        DiagnosticFinding(category="bound", severity="info", title="memory-bound", evidence="")])
    parent = Individual(id="1", source="a = 1\n", status="ok", fitness=1.2, diagnosis=diagnosis,
                        parent_info=ParentInfo(source="a = 1\n", speedup_eager=1.2))
    child = Individual(id="2", source="a = 2\n", expert="tuner", status="ok", fitness=1.5,
                       parent_info=ParentInfo(source="a = 2\n", speedup_eager=1.5))
    experience.record(child, None, None)  # no parent: not a step
    experience.record(child, parent, {"changes": {"BLOCK": {"from": 64, "to": 128}}})
    steps = library.steps()
    assert len(steps) == 1 and steps[0]["diagnosis"] == ["bound"] and steps[0]["run_id"] == "run-a"
    assert library.tuning_records(SIG)[0]["changes"] == {"BLOCK": {"from": 64, "to": 128}}
    first = Individual(id="3", source="a = 3\n", expert="initializer", status="ok", fitness=1.3,
                       parent_info=ParentInfo(source="a = 3\n", speedup_eager=1.3))
    experience.record(first, None, {"strategy": "row per program"})  # a first kernel written to a strategy
    written = [s for s in library.steps() if s["expert"] == "initializer"]
    assert len(written) == 1 and written[0]["parent_source"] is None and written[0]["speedup_after"] == 1.3
    assert "with the strategy 'row per program'" in library.get(written[0]["id"])["title"]
    assert experience.tuning_preferences() == {"BLOCK": 128}
    experience.finish({"source": "class ModelNew: pass\n", "speedup_eager": 1.5}, "affine")
    kernels = experience.kernels_for_this_problem()
    assert [k["code"] for k in kernels] == ["class ModelNew: pass\n"]
    assert experience.retrieve(3)  # the seeded library answers too


def test_genome_moves_that_paid_off_are_learned_for_the_problem_class(tmp_path):
    library = Library(tmp_path / "lib.sqlite")
    experience = Experience(library, SIG, "run-a", "NVIDIA H200")
    parent = Individual(id="1", source="a = 1\n", status="ok", fitness=1.0,
                        parent_info=ParentInfo(source="a = 1\n", speedup_eager=1.0))
    for index, (expert, kind, speedup) in enumerate([("recompose", "fuse", 1.6), ("recombine", "crossover", 0.9),
                                                     ("tuner", None, 2.0)]):
        child = Individual(id=str(index + 2), source=f"a = {index + 2}\n", expert=expert, status="ok", fitness=speedup,
                           parent_info=ParentInfo(source="x", speedup_eager=speedup))
        data = {"move": {"kind": kind, "changed": {"plan": ["plain", "moments"]}}} if kind else {"changes": {}}
        experience.record(child, parent, data)
    records = library.genome_records(SIG)
    assert sorted(r["move"]["kind"] for r in records) == ["crossover", "fuse"]  # the tuner's steps are not moves
    gains = experience.move_gains()
    assert abs(gains["fuse"] - 1.6) < 1e-9 and abs(gains["crossover"] - 0.9) < 1e-9
    other = Experience(library, {**SIG, "kind": "gemm", "ops": ["aten.mm"]}, "run-b", None)
    assert other.move_gains() == {}  # another class of problem learned nothing from these


def test_without_a_library_nothing_is_read_or_written():
    experience = Experience(None, SIG, "run", None)
    assert experience.retrieve(5) == [] and experience.kernels_for_this_problem() == []
    assert experience.tuning_preferences() == {} and experience.finish(None, "x") == []
    assert experience.move_gains() == {}


def test_a_library_damaged_mid_file_is_dropped_with_one_note_and_the_run_goes_on(tmp_path):
    import random

    path = tmp_path / "lib.sqlite"
    with Library(path) as library:
        library.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    rng = random.Random(7)
    for i in range(len(data) // 2, len(data) // 2 + 8192):  # 8 KiB of noise mid-file: the header still opens
        data[i] = rng.randrange(256)
    path.write_bytes(bytes(data))
    notes: list[str] = []
    experience = Experience(Library(path, seed=False), SIG, "run-a", "cpu", on_damaged=notes.append)
    assert experience.kernels_for_this_problem() == []  # the query meets the damage
    assert experience.library is None and len(notes) == 1
    assert str(path) in notes[0] and "goes on without it" in notes[0] and "\n" not in notes[0]
    parent = Individual(id="1", source="a = 1\n", status="ok", fitness=1.2)
    experience.record(Individual(id="2", source="a = 2\n", status="ok", fitness=1.5), parent, None)
    assert experience.retrieve(3) == [] and experience.finish(None, "affine") == [] and len(notes) == 1


def test_a_step_that_was_not_timed_records_no_speedup(tmp_path):
    """On CPU a correct candidate's fitness is 1.0 so that the search can rank it; that is no measurement, and
    the library's step says so instead of '1.00x -> 1.00x'."""
    library = Library(tmp_path / "lib.sqlite")
    experience = Experience(library, SIG, "run-a", "cpu")
    parent = Individual(id="1", source="a = 1\n", status="ok", fitness=1.0, parent_info=ParentInfo(source="a = 1\n"))
    child = Individual(id="2", source="a = 2\n", expert="tuner", status="ok", fitness=1.0,
                       parent_info=ParentInfo(source="a = 2\n"))
    experience.record(child, parent, None)
    step = library.steps()[0]
    assert step["speedup_before"] is None and step["speedup_after"] is None
    assert library.list(type="step")[0]["title"].endswith("ok, speed not measured")


def test_retrieval_is_cut_to_its_token_budget_and_says_what_it_left_out(tmp_path):
    library = Library(tmp_path / "lib.sqlite")
    experience = Experience(library, SIG, "run-a", "cpu")
    whole = experience.retrieve(5)
    assert whole and all(item["type"] != "note" for item in whole)
    assert all(item["score"] is not None and item["why"] for item in whole)
    assert len(whole) >= 2  # the pointwise seed kernel and the pointwise seed note
    cut = experience.retrieve(5, tokens=whole[0]["tokens"])
    assert [item["id"] for item in cut[:-1]] == [whole[0]["id"]] and "code" in cut[0]
    assert cut[-1]["type"] == "note" and "within" in cut[-1]["text"]
    assert cut[-1]["left_out"] == [item["id"] for item in whole[1:]]


def test_without_a_signature_the_note_says_the_library_was_not_searched(tmp_path):
    experience = Experience(Library(tmp_path / "lib.sqlite"), None, "run-a", "cpu")
    [note] = experience.retrieve(5)
    assert note["type"] == "note" and note["id"] is None and "not searched" in note["text"]
