"""kfoundry.optimize.session: a run keeps the LLM settings it was built with, never a key, and --resume
builds the same LLM from them whatever today's environment says; a run stored before keeps working."""

import json
import shlex
import sys

from kfoundry.optimize.session import open_session
from tests.optimize.helpers import AFFINE, WRITER, eval_options

SECRET = "sk-this-key-must-never-be-stored-0123456789"


def _spec(tmp_path):
    return "cmd:" + " ".join(shlex.quote(w) for w in [sys.executable, str(WRITER), str(tmp_path / "llm.log")])


def test_a_resumed_run_builds_its_llm_from_the_settings_it_stored(tmp_path, monkeypatch):
    monkeypatch.setenv("KFOUNDRY_LLM_CONCURRENCY", "3")
    monkeypatch.setenv("KFOUNDRY_LLM_RETRIES", "1")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    session = open_session(AFFINE, out=tmp_path / "run", options=eval_options(), llm=[_spec(tmp_path)],
                           max_evals=2)
    assert session.llm.concurrency == 3
    stored = session.store.settings
    session.store.close()
    assert stored["llm"]["llm_concurrency"] == 3 and stored["llm"]["llm_retries"] == 1
    assert SECRET not in json.dumps(stored) and SECRET not in (tmp_path / "run" / "run.sqlite").read_bytes().decode(
        "latin-1")
    monkeypatch.setenv("KFOUNDRY_LLM_CONCURRENCY", "7")  # today's environment says otherwise
    resumed = open_session(resume=tmp_path / "run")
    assert resumed.resumed and resumed.llm.concurrency == 3 and resumed.settings.max_evals == 2
    resumed.store.close()


def test_a_run_stored_without_llm_settings_takes_todays(tmp_path, monkeypatch):
    session = open_session(AFFINE, out=tmp_path / "run", options=eval_options(), llm=[_spec(tmp_path)])
    session.store.close()
    import sqlite3

    db = sqlite3.connect(tmp_path / "run" / "run.sqlite")
    [(key, value)] = [row for row in db.execute("SELECT * FROM meta") if row[0] == "settings"]
    settings = json.loads(value)
    settings.pop("llm")  # as a run of an earlier version stored it
    db.execute("UPDATE meta SET value = ? WHERE key = 'settings'", (json.dumps(settings),))
    db.commit()
    db.close()
    monkeypatch.setenv("KFOUNDRY_LLM_CONCURRENCY", "5")
    resumed = open_session(resume=tmp_path / "run")
    assert resumed.llm.concurrency == 5
    resumed.store.close()


def _llm_context(session):
    from kfoundry.search import Archipelago

    experts = session.experts(problem_source=AFFINE.read_text(), name="affine", device=None, experience=[],
                              archipelago=Archipelago(k=1), left_over=[], preferred={},
                              baseline_ms={"eager": 2.0, "compile": 1.5}.get)
    return next(e.context for e in experts if getattr(e, "context", None) is not None)


def test_the_prompts_get_the_baselines_only_where_they_are_timed_at_the_files_own_sizes(tmp_path):
    at_own_sizes = open_session(AFFINE, out=tmp_path / "own", options=eval_options(), llm=[_spec(tmp_path)])
    context = _llm_context(at_own_sizes)
    at_own_sizes.store.close()
    assert context.baseline_ms("eager") == 2.0
    smaller = open_session(AFFINE, out=tmp_path / "set", options=eval_options(set_values={"dim": 8}),
                           llm=[_spec(tmp_path)])
    assert _llm_context(smaller).baseline_ms is None  # timed at --set sizes: not the roofline line's sizes
    smaller.store.close()


def test_a_cpu_run_with_an_llm_compiles_its_kernels_for_the_target_gpu_and_one_without_does_not(tmp_path):
    with_llm = open_session(AFFINE, out=tmp_path / "llm", options=eval_options(), llm=[_spec(tmp_path)],
                            target_gpu="A100")
    evaluator, _ = with_llm.evaluator(lambda *a, **k: None)
    assert with_llm.options.static_target == "8.0" and evaluator.options.static_target == "8.0"
    evaluator.close()
    with_llm.store.close()
    without = open_session(AFFINE, out=tmp_path / "none", options=eval_options())
    evaluator, _ = without.evaluator(lambda *a, **k: None)
    assert without.options.static_target is None
    evaluator.close()
    without.store.close()
