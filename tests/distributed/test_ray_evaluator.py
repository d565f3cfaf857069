"""Evaluation workers as Ray actors, on a local Ray instance (2 CPUs) started here; evaluations on CPU
through Triton's interpreter. Worker faults: an actor killed in the middle of an evaluation, an actor
process killed outright, a candidate that kills every worker it runs on."""

import os
import signal
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'kfoundry[ray]')")
pytestmark = pytest.mark.xdist_group("ray")  # one local Ray instance at a time (tests/conftest.py)

from kfoundry.distributed import RayEvaluator, connect, disconnect
from kfoundry.evaluate import EvalOptions
from kfoundry.evaluate.parent.process import work_root
from kfoundry.evaluate.parent.workdirs import PREFIX
from kfoundry.evaluate.shared.protocol import STDERR
from kfoundry.types import Evaluation
from tests.helpers import alive


@pytest.fixture(scope="module")
def cluster():
    connect("ray", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    disconnect()


@pytest.fixture(scope="module")
def evaluator(cluster, problems_dir):
    with RayEvaluator(problems_dir / "affine.py", EvalOptions(device="cpu", trials=1, timeout_s=120),
                      workers=2) as opened:
        opened.prepare()
        yield opened


def _variant(candidates_dir: Path, tmp_path: Path, name: str, imports: str, *init_lines: str) -> Path:
    """affine_ok.py with extra imports and extra lines at the end of ModelNew.__init__."""
    text = (candidates_dir / "affine_ok.py").read_text()
    text = text.replace("import torch\n", imports + "import torch\n", 1)
    added = "".join(f"        {line}\n" for line in init_lines)
    text = text.replace("        self.shift = shift\n", "        self.shift = shift\n" + added, 1)
    path = tmp_path / name
    path.write_text(text)
    return path


def _slow_until(candidates_dir: Path, tmp_path: Path, name: str) -> tuple[Path, Path]:
    """A correct candidate that sleeps up to 60 s in __init__ until the returned marker file exists: killed in
    that sleep, its worker would outlive the kill by a minute unless something ends it. It says on its stderr
    (its worker's log) that it waits."""
    marker = tmp_path / f"{name}.go"
    path = _variant(candidates_dir, tmp_path, name, "import os\nimport sys\nimport time\n",
                    f"sys.stderr.write({_waiting(marker)!r})",
                    "for _ in range(600):",
                    f"    if os.path.exists({str(marker)!r}):",
                    "        break",
                    "    time.sleep(0.1)")
    return path, marker


def _waiting(marker: Path) -> str:
    return f"waiting for {marker}\n"


def _running(evaluator: RayEvaluator, candidate: Path, marker: Path, timeout_s: float = 60) -> dict:
    """The in-flight record of `candidate`, once its worker runs the candidate's __init__, asleep until `marker`
    exists (the candidate says so in its worker's log, in the worker's folder)."""
    root = Path(work_root() or tempfile.gettempdir())
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [r for r in evaluator.in_flight() if r["candidate"] == str(candidate)]
        if found and any(_waiting(marker) in _text(log) for log in root.glob(f"{PREFIX}candidate-*/{STDERR}")):
            return found[0]
        time.sleep(0.05)
    raise AssertionError("the evaluation never started")


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:  # a folder removed meanwhile
        return ""


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def test_an_optimize_run_joins_the_callers_ray_connection_and_leaves_it_as_it_was(cluster, tmp_path):
    """kfoundry.optimize with --cluster ray in a process already connected (this module's instance): its evaluations
    run on an actor there, and the caller's connection is left as it was (a run that starts a local instance of its
    own ends it: tests/optimize/test_driver.py). First in this module: the evaluator below takes both CPUs."""
    import json
    import sqlite3

    from kfoundry.optimize import OptimizeSettings, optimize
    from tests.optimize.helpers import AFFINE, AFFINE_KERNEL, eval_options

    again = optimize(AFFINE, out=tmp_path / "again", options=eval_options(), seeds=[AFFINE_KERNEL],
                     settings=OptimizeSettings(islands=1, library="off", cluster="ray", compose_variants=0),
                     max_evals=1)
    assert again["evaluations"] == 1 and ray.is_initialized()  # joined, and left as it was
    with sqlite3.connect(tmp_path / "again" / "run.sqlite") as conn:
        settings = [json.loads(row[0])["settings"] for row in conn.execute("SELECT evaluation_json FROM evaluations")]
    assert settings and all("node" in s["worker"] for s in settings)  # evaluated by a Ray actor


def test_evaluations_come_back_as_local_records(evaluator, problems_dir, candidates_dir):
    assert evaluator.device == "cpu" and evaluator.source.name == "affine"
    assert evaluator.prepared.device_facts.kind == "cpu" and len(evaluator.prepared.workers) == 2
    names = {"affine_ok.py": "ok", "wrong_constant.py": "wrong_output"}
    with ThreadPoolExecutor(2) as executor:
        evaluations = list(executor.map(evaluator.evaluate, [candidates_dir / n for n in names]))
    for (name, status), evaluation in zip(names.items(), evaluations):
        assert isinstance(evaluation, Evaluation) and evaluation.status == status, evaluation.message
        assert evaluation.candidate == str((candidates_dir / name).resolve())  # the driver's paths, not the actor's
        assert evaluation.problem == str((problems_dir / "affine.py").resolve())
        assert evaluation.diagnosis is not None and evaluation.device == "cpu"
        assert evaluation.settings["worker"]["attempts"] == 1
    assert {e.settings["worker"]["index"] for e in evaluations} == {0, 1}
    assert evaluations[0].settings["seed"] == evaluations[1].settings["seed"]


def test_an_actor_killed_mid_evaluation_loses_nothing(evaluator, candidates_dir, tmp_path):
    slow, go = _slow_until(candidates_dir, tmp_path, "slow.py")
    results = []
    thread = threading.Thread(target=lambda: results.append(evaluator.evaluate(slow)))
    thread.start()
    running = _running(evaluator, slow, go)
    ray.kill(running["actor"])
    go.touch()  # the second run goes straight through
    thread.join(timeout=180)
    assert len(results) == 1  # arrived, once
    evaluation = results[0]
    assert evaluation.status == "ok", evaluation.message
    assert evaluation.settings["worker"]["attempts"] == 2
    assert any("died while evaluating it" in w and "ActorDiedError" in w for w in evaluation.warnings)


def test_an_actor_process_killed_outright_leaves_no_candidate_behind(evaluator, candidates_dir, tmp_path):
    slow, go = _slow_until(candidates_dir, tmp_path, "slow_again.py")
    with ThreadPoolExecutor(1) as executor:
        future = executor.submit(evaluator.evaluate, slow)
        running = _running(evaluator, slow, go)
        workers = _children(running["pid"])
        assert workers, "the actor runs its candidate in a worker process of its own"
        os.kill(running["pid"], signal.SIGKILL)  # as the OOM killer would: no clean-up in the actor
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in workers if alive(pid)], "a candidate worker outlived its actor"
        go.touch()
        evaluation = future.result(timeout=180)
    assert evaluation.status == "ok" and evaluation.settings["worker"]["attempts"] == 2, evaluation.message


def test_a_candidate_cannot_kill_the_actor_that_runs_its_worker(evaluator, candidates_dir, tmp_path):
    """It once could (the actor was lost, and retried): the sandbox's signal scope now denies the kill."""
    killer = _variant(candidates_dir, tmp_path, "killer.py", "import os\nimport signal\n",
                      "os.kill(os.getppid(), signal.SIGKILL)")
    evaluation = evaluator.evaluate(killer)
    assert evaluation.status == "runtime_error" and "PermissionError" in evaluation.message, evaluation.message
    assert evaluation.candidate == str(killer.resolve()) and evaluation.diagnosis is not None
    again = evaluator.evaluate(candidates_dir / "affine_ok.py")  # the same actors go on
    assert again.status == "ok", again.message


def test_after_disconnect_nothing_starts_a_new_ray_instance(evaluator, candidates_dir):
    # last in this module: it disconnects. A replacement thread that finishes late retires its actor and
    # kills lost ones; Ray's API would start a new local instance for that, which the process would then
    # depend on (and Ray ends a process whose instance went away with exit code 1).
    # an earlier test's replacement still starting its actor would be inside Ray's API when the instance stops,
    # and Ray ends a process whose instance goes away under a call (the suite's worker, once in a CI run): the
    # late finish is played below by hand instead
    deadline = time.monotonic() + 120
    while evaluator._pending and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not evaluator._pending, "a replacement actor did not start within 120 s"
    slot = next(iter(evaluator._slots.values()))
    disconnect()
    assert not ray.is_initialized()
    evaluator._retire(slot)
    evaluator._kill(slot.actor)
    with pytest.raises(Exception, match="not connected to Ray"):
        evaluator.evaluate(candidates_dir / "affine_ok.py")
    evaluator.close()
    assert not ray.is_initialized()
