"""A running `kfoundry optimize` killed with SIGKILL, then resumed: nothing evaluated is lost or
evaluated again, the interrupted generation is taken in, and the budget holds."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

from kfoundry.optimize import optimize
from tests.optimize.helpers import AFFINE, writer_spec

# the composer's four first kernels, then LLM children: a kill after 3 verdicts lands in the first generation, and
# the resume evaluates its last kernel and a child (each evaluation of an LLM run on CPU also compiles its kernels
# for the target GPU, seconds apiece: no more of them than that)
MAX_EVALS = 5


def _rows(db, sql):
    try:
        with sqlite3.connect(db, timeout=30) as conn:
            return conn.execute(sql).fetchall()
    except sqlite3.OperationalError:  # not created yet
        return []


def _kill_after(command: list[str], db, verdicts: int) -> None:
    """Start `kfoundry optimize` in a session of its own and SIGKILL all of it once `verdicts` are stored."""
    proc = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            finished = _rows(db, "SELECT COUNT(*) FROM evaluations WHERE finished_at IS NOT NULL")
            if finished and finished[0][0] >= verdicts:
                break
            time.sleep(0.1)
        assert proc.poll() is None, f"the run ended before it could be killed: {proc.stderr.read().decode()[-2000:]}"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def _evaluated_codes(db, names: list[str]) -> list[str]:
    """The code of every finished evaluation, stripped as `_code` does."""
    sources = [row[0] for row in _rows(db, "SELECT c.source FROM evaluations e JOIN candidates c"
                                           " ON c.id = e.candidate_id WHERE e.finished_at IS NOT NULL")]
    return [_code(source, names) for source in sources]


def _code(source: str, names: list[str]) -> str:
    """A kernel's code without comments, docstrings or the names of the problem and the run's folder."""
    import ast

    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            body[0] = ast.Pass()
    text = ast.unparse(tree)
    for name in names:
        text = text.replace(name, "NAME")
    return text


def test_sigkill_mid_run_then_resume_loses_and_repeats_nothing(tmp_path):
    run = tmp_path / "run"
    db = run / "run.sqlite"
    command = [sys.executable, "-m", "kfoundry", "optimize", str(AFFINE), "--device", "cpu", "--trials", "1",
               "--islands", "2", "--max-evals", str(MAX_EVALS), "--llm", writer_spec(tmp_path / "llm.log"),
               "--library", str(tmp_path / "lib.sqlite"), "-o", str(run), "--quiet"]
    _kill_after(command, db, 3)
    before = _rows(db, "SELECT candidate_id, status FROM evaluations WHERE finished_at IS NOT NULL")
    assert 3 <= len(before) < MAX_EVALS
    kept = _rows(db, "SELECT value FROM state WHERE key = 'elapsed'")  # stored as it passed, kill or not
    assert kept and json.loads(kept[0][0])["s"] > 0

    result = optimize(resume=run, quiet=True)
    search = json.loads(_rows(db, "SELECT value FROM state WHERE key = 'search'")[0][0])["search"]
    assert search["elapsed_s"] >= json.loads(kept[0][0])["s"]  # the killed session's time counts for --max-time

    finished = _rows(db, "SELECT candidate_id, status FROM evaluations WHERE finished_at IS NOT NULL")
    per_candidate = _rows(db, "SELECT candidate_id, COUNT(*) FROM evaluations WHERE finished_at IS NOT NULL"
                              " GROUP BY candidate_id HAVING COUNT(*) > 1")
    candidates = _rows(db, "SELECT id, source_hash FROM candidates")
    assert set(before) <= set(finished)  # every verdict from before the kill stands, unchanged
    assert per_candidate == []  # no candidate evaluated twice
    assert len({h for _, h in candidates}) == len(candidates)  # no code stored twice
    codes = _evaluated_codes(db, ["affine", run.name])
    assert len(set(codes)) == len(codes)  # nor evaluated twice under other comments, docstrings or names
    assert len(finished) == len(candidates) == MAX_EVALS == result["evaluations"]  # none lost, budget held
    assert _rows(db, "SELECT COUNT(*) FROM evaluations WHERE finished_at IS NULL") == [(0,)]
    sessions = _rows(db, "SELECT data FROM events WHERE kind = 'session_start'")
    assert len(sessions) == 2 and '"resumed": true' in sessions[1][0]
    assert (run / "best.py").is_file() and result["best"] is not None


def test_a_run_killed_at_any_point_resumes_without_evaluating_a_kernel_again(tmp_path):
    """One run killed again and again (with the test above, 3 with an LLM: five points): after its first verdict
    (before the first generation ended: the composer runs again on resume), then each resume after 2, 4 and 7
    verdicts in all; nothing is evaluated twice, whatever the point."""
    # no LLM: the first generation is the composer's, which a resume in that generation composes again
    run = tmp_path / "run-folder"
    db = run / "run.sqlite"
    start = [sys.executable, "-m", "kfoundry", "optimize", str(AFFINE), "--device", "cpu", "--trials", "1",
             "--max-evals", "10", "--llm", "none", "--library", "off", "-o", str(run), "--quiet"]
    resume = [sys.executable, "-m", "kfoundry", "optimize", "--resume", str(run), "--quiet"]
    for kill_after in (1, 2, 4, 7):
        _kill_after(start if kill_after == 1 else resume, db, kill_after)
        if kill_after == 1:
            assert not _rows(db, "SELECT value FROM state WHERE key = 'search'")
        codes = _evaluated_codes(db, ["affine", run.name])
        assert len(codes) >= kill_after and len(set(codes)) == len(codes), f"a kernel evaluated twice ({kill_after})"
    result = optimize(resume=run, quiet=True)
    codes = _evaluated_codes(db, ["affine", run.name])
    assert len(set(codes)) == len(codes) == result["evaluations"] == 10, "a kernel was evaluated twice"
    sessions = _rows(db, "SELECT data FROM events WHERE kind = 'session_start'")
    assert len(sessions) == 5 and all('"resumed": true' in s[0] for s in sessions[1:])


def test_ctrl_c_stops_at_once_and_says_how_to_resume(tmp_path):
    run = tmp_path / "run"
    db = run / "run.sqlite"
    command = [sys.executable, "-m", "kfoundry", "optimize", str(AFFINE), "--device", "cpu", "--trials", "1",
               "--llm", "none", "--max-evals", "40", "--no-library", "-o", str(run), "--quiet"]
    # the run starts with Ctrl-C as a terminal's process has it: in the full suite an earlier test left SIGINT
    # ignored in this worker, and an ignored signal stays ignored across exec
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            finished = _rows(db, "SELECT COUNT(*) FROM evaluations WHERE finished_at IS NOT NULL")
            if finished and finished[0][0] >= 1:
                break
            time.sleep(0.2)
        assert proc.poll() is None, f"the run ended before Ctrl-C: {proc.stderr.read().decode()[-2000:]}"
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        stderr = proc.communicate(timeout=60)[1].decode()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and time.monotonic() - sent < 30
    assert f"continue with kfoundry optimize --resume {run}" in " ".join(stderr.split())
