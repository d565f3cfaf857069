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
