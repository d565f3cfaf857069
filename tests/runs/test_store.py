import json
import sqlite3

import pytest

from kfoundry.errors import UsageError
from kfoundry.runs import SCHEMA_VERSION, RunStore, RunStoreError, source_hash
from kfoundry.sqlite_files import DamagedFile
from tests.runs.conftest import PROBLEM, evaluation


def test_create_records_problem_settings_and_seed(store):
    meta = store.meta()
    assert meta["schema_version"] == SCHEMA_VERSION
    assert store.problem_source() == PROBLEM
    assert (store.run_dir / "problem.py").read_text() == PROBLEM
    assert store.settings == {"islands": 2} and store.seed == 7
    journal = sqlite3.connect(store.path).execute("PRAGMA journal_mode").fetchone()[0]
    assert journal == "wal"


def test_create_refuses_a_non_empty_run_dir(store, problem_file):
    with pytest.raises(UsageError, match="--resume"):
        RunStore.create(store.run_dir, problem_file, {}, seed=1)


def test_create_accepts_an_existing_empty_dir(tmp_path, problem_file):
    run_dir = tmp_path / "empty"
    run_dir.mkdir()
    RunStore.create(run_dir, problem_file, {}, seed=1).close()
    assert (run_dir / "problem.py").read_text() == PROBLEM
    with RunStore.open(run_dir) as made:  # a whole run store, made in the folder that was there
        assert made.run_dir == run_dir and made.seed == 1 and made.problem_source() == PROBLEM
        assert made.meta()["schema_version"] == SCHEMA_VERSION


def test_round_trip_through_open(store):
    parent = store.add_candidate("x = 1  # seed\n", [], "seed-expert", 0, 0, "seed")
    child = store.add_candidate("x = 2\n", [parent], "llm-expert", 1, 1, "llm")
    eid = store.start_evaluation(child)
    store.finish_evaluation(eid, evaluation("ok", speedup_eager=1.5))
    store.add_llm_call(child, "llm-expert", {"text": "code", "provider": "openai:m", "model": "m",
                                             "input_tokens": 10, "output_tokens": 5, "cost_usd": 0.01,
                                             "latency_s": 1.0, "attempts": 1, "request_hash": "r"},
                       prompt_hash="p", failure=None)
    store.save_state("populations", {"0": [parent], "1": [child]})
    store.save_state("populations", {"0": [parent, child], "1": [child]})
    store.event("migration", source=0, target=1, candidate=child)
    store.close()

    with RunStore.open(store.run_dir) as again:
        assert again.find_by_hash(source_hash("x = 1\n")) == parent
        assert again.find_by_hash("nope") is None
        assert again.candidate(child)["parent_ids"] == [parent]
        stored = again.evaluation(eid)
        assert stored["status"] == "ok" and stored["speedup_eager"] == 1.5
        assert stored["trials_passed"] == 3 and stored["max_abs_error"] == 1e-6
        assert stored["evaluation"]["timing"]["speedup_eager"] == 1.5
        assert stored["diagnosis"]["status"] == "ok"
        assert again.load_state("populations") == {"0": [parent, child], "1": [child]}
        assert again.load_state("missing", default=0) == 0
        assert again.events("migration")[0]["candidate"] == child
        assert again.totals()["llm_calls"] == 1


def test_finish_evaluation_accepts_an_evaluation_object_and_refuses_twice(store):
    from kfoundry.types import Diagnosis, Evaluation

    cid = store.add_candidate("y = 1\n", [], "e", 0, 0, "template")
    eid = store.start_evaluation(cid)
    store.finish_evaluation(eid, Evaluation(status="wrong_output", message="off by one"),
                            Diagnosis(status="wrong_output", summary="values differ", focus="repair"))
    stored = store.evaluation(eid)
    assert Diagnosis.from_dict(stored["diagnosis"]).focus == "repair"
    with pytest.raises(ValueError, match="already finished"):
        store.finish_evaluation(eid, evaluation("ok"))
    with pytest.raises(ValueError, match="status"):
        store.finish_evaluation(store.start_evaluation(cid), {"status": "great"})


def test_amend_timing_fills_in_baselines_measured_after_the_verdict(store):
    from kfoundry.types import Evaluation, TimingReport, TimingStats

    cid = store.add_candidate("w = 1\n", [], "e", 0, 0, "template")
    eid = store.start_evaluation(cid)
    early = Evaluation(status="ok", message="", timing=TimingReport(runtime_ms=2.0, eager_ms=3.0, speedup_eager=1.5,
                                                        baselines_pending=["compile"]))
    with pytest.raises(ValueError, match="no finished evaluation"):
        store.amend_timing(eid, early)
    store.finish_evaluation(eid, early)
    assert store.evaluation(eid)["speedup_compile"] is None
    early.timing.compile_ms, early.timing.speedup_compile, early.timing.baselines_pending = 2.5, 1.25, []
    early.timing.baselines["compile"] = TimingStats(median_ms=2.5, q1_ms=2.4, q3_ms=2.6, min_ms=2.3, max_ms=2.7,
                                                    trials=100)
    store.amend_timing(eid, early)
    stored = store.evaluation(eid)
    assert stored["compile_ms"] == 2.5 and stored["speedup_compile"] == 1.25 and stored["speedup_eager"] == 1.5
    assert stored["evaluation"]["timing"]["baselines_pending"] == []
    assert store.best("speedup_compile")["evaluation_id"] == eid


def test_non_finite_numbers_are_stored_as_unknown(store):
    cid = store.add_candidate("z = 1\n", [], "e", 0, 0, "tuner")
    eid = store.start_evaluation(cid)
    store.finish_evaluation(eid, evaluation("ok", speedup_eager=float("inf"), runtime_ms=float("nan")))
    assert store.evaluation(eid)["speedup_eager"] is None


def test_restarting_an_in_flight_evaluation_keeps_one_row(store):
    cid = store.add_candidate("w = 1\n", [], "e", 0, 0, "seed")
    first = store.start_evaluation(cid)
    assert store.start_evaluation(cid) == first
    assert [(row["id"], row["attempts"]) for row in store.in_flight()] == [(first, 2)]


def test_bad_origin_is_refused(store):
    with pytest.raises(ValueError, match="origin"):
        store.add_candidate("v = 1\n", [], "e", 0, 0, "magic")


def test_llm_calls_keep_only_reply_fields_and_no_keys(store):
    key = "sk-" + "A1b2C3d4E5f6G7h8"
    store.add_llm_call(None, "e", {"text": f"echo {key}", "provider": "openai:m", "model": "m",
                                   "input_tokens": None, "output_tokens": None, "cost_usd": None,
                                   "latency_s": 0.5, "attempts": 2, "request_hash": "r",
                                   "api_key": key}, prompt_hash="p", failure=None)
    store.add_llm_call(None, "e", None, prompt_hash="p", failure=f"401 for key {key}")
    store.close()
    assert key not in (store.run_dir / "run.sqlite").read_bytes().decode("latin-1")
    with RunStore.open(store.run_dir, resume=False) as again:
        totals = again.totals()
    assert totals["llm_calls"] == 2 and totals["llm_failed_calls"] == 1
    assert totals["unknown_cost_calls"] == 1 and totals["cost_usd"] is None


def test_open_missing_store(tmp_path):
    with pytest.raises(RunStoreError, match="nothing to resume"):
        RunStore.open(tmp_path / "nowhere")
    with pytest.raises(RunStoreError, match="is not a run folder") as read_only:  # read, as `report` does
        RunStore.open(tmp_path / "nowhere", resume=False)
    assert "resume" not in str(read_only.value)


def test_open_corrupt_store(tmp_path):
    (tmp_path / "run.sqlite").write_bytes(b"this is not a database" * 100)
    with pytest.raises(DamagedFile, match="run.sqlite is damaged .file is not a database.: the run's records"):
        RunStore.open(tmp_path)


@pytest.mark.parametrize("where", ["header", "middle", "end"])
def test_a_store_damaged_anywhere_is_a_damaged_file_not_a_traceback(store, where):
    """Resume and the report read the whole store: damage at the header, in the middle or at the end is
    either harmless to what they read or a DamagedFile (one line, exit code 2 in the CLI)."""
    import random

    from kfoundry.runs.report_data import gather

    for k in range(300):  # enough rows for the file to have a middle
        cid = store.add_candidate(f"x = {k}\n" * 40, [], "tuner", 0, 0, "tuner")
        store.finish_evaluation(store.start_evaluation(cid), evaluation(speedup_eager=1.0 + k / 1000, runtime_ms=1.0))
    store.close()
    data = bytearray(store.path.read_bytes())
    rng = random.Random(7)
    start = {"header": 0, "middle": len(data) // 2, "end": max(0, len(data) - 8192)}[where]
    for i in range(start, min(len(data), start + (100 if where == "header" else 8192))):
        data[i] = rng.randrange(256)
    store.path.write_bytes(bytes(data))
    outcomes = []
    for read in (lambda: RunStore.open(store.run_dir).close(), lambda: gather(store.run_dir)):
        try:
            read()
            outcomes.append("read")
        except DamagedFile as exc:
            assert str(store.path) in str(exc) and "\n" not in str(exc)
            outcomes.append("damaged")
    if where != "end":  # the last pages may hold only free space
        assert "damaged" in outcomes, outcomes
    if where == "middle":
        assert outcomes[0] == "damaged"  # a resume checks the whole store first (PRAGMA quick_check)


def test_open_another_sqlite_file(tmp_path):
    sqlite3.connect(tmp_path / "run.sqlite").execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(RunStoreError, match="not a kfoundry run store"):
        RunStore.open(tmp_path)


def test_open_another_schema_version(store):
    store.close()
    conn = sqlite3.connect(store.path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (json.dumps(SCHEMA_VERSION + 1),))
    conn.commit()
    conn.close()
    with pytest.raises(RunStoreError, match=f"schema version {SCHEMA_VERSION + 1}"):
        RunStore.open(store.run_dir)
