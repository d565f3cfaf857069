"""The sandbox's adversarial corpus (tests/fixtures/sandbox), through the real evaluator on CPU with the
guard OFF, so that nothing but the OS restrictions stands in the way.

Each candidate makes one attack in its constructor (inside its worker) and raises its outcome, which
comes back in the verdict's message: "got: ..." where the attack worked, "blocked: ..." where it did
not. The evaluator runs in a process of its own whose environment holds an API key, as `kfoundry`
would; the candidates' targets (the baseline cache, a kfoundry.toml with [keys], a library folder, a
run folder, /tmp, a TCP port) are real and are checked afterwards. The same attacks are run once with
`--sandbox off` as a control (beside the sandboxed run, in the same process, against targets of its
own): there they succeed, so what stops them is the sandbox, not the attack's own mistake. Cases
whose first line says `sandbox: environment` are stopped by the environment's allow-list, which
holds in both runs.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from kfoundry.evaluate.shared.signed_cache import KEY_FILE
from kfoundry.llm.redact import MASK
from kfoundry.sandbox import landlock
from tests.helpers import alive

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fixtures" / "sandbox"
PROBLEM = ROOT / "tests" / "fixtures" / "problems" / "affine.py"
NO_CONTROL = {"py_write_package", "cpp_host_attacks"}  # unsandboxed they would write into the source tree
# each job (JSON: sandbox mode, cache folder, output file, candidate files) with an evaluator of its own; the jobs
# side by side, in this one process
RUNNER = r"""
import json, sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from kfoundry.evaluate import EvalOptions, Evaluator
problem, device, *jobs = sys.argv[1:]


def run(job):
    mode, cache, out, *files = json.loads(job)
    options = EvalOptions(device=device, trials=1, seed=3, guard=False, sandbox=mode, cache_dir=Path(cache),
                          workers=2, timeout_s=400)
    with Evaluator(problem, options) as evaluator:
        evaluator.prepare()
        with ThreadPoolExecutor(evaluator.slots) as pool:
            results = list(pool.map(evaluator.evaluate, files))
    Path(out).write_text(json.dumps({Path(f).stem: {"status": r.status, "message": r.message, "sandbox": r.sandbox,
                                                    "warnings": r.warnings} for f, r in zip(files, results)}))


with ThreadPoolExecutor(len(jobs)) as pool:
    list(pool.map(run, jobs))
"""


class Listener:
    """A TCP port on localhost that counts the connections it got."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()


def outcome(message: str) -> str:
    assert "ATTACK " in message, message
    return message.rsplit("ATTACK ", 1)[1]  # the message quotes the raising line first


def _make_world(base: Path, secret: str) -> dict:
    """The targets (beside the secret), and the corpus with their paths filled in."""
    w = {"secret": secret, "cache": base / "cache", "project": base / "project", "library": base / "library",
         "run": base / "run", "tmp_target": Path(tempfile.gettempdir()) / f"sandbox-probe-{secrets.token_hex(6)}"}
    for folder in ("cache", "project", "library", "run"):
        w[folder].mkdir()
    (w["cache"] / KEY_FILE).write_text(secrets.token_hex(32))
    config = w["project"] / "kfoundry.toml"
    config.write_text(f'[keys]\nopenai = "{w["secret"]}"\n')
    w["listener"] = Listener()
    fills = {"@@SECRET@@": w["secret"], "@@CACHE_DIR@@": str(w["cache"]), "@@CONFIG@@": str(config),
             "@@LIBRARY@@": str(w["library"]), "@@RUN_DIR@@": str(w["run"]), "@@TMP_TARGET@@": str(w["tmp_target"]),
             "@@TMPDIR@@": tempfile.gettempdir(), "@@PORT@@": str(w["listener"].port)}
    w["files"] = {}
    for path in sorted(CORPUS.glob("*.py")):
        text = path.read_text()
        for key, value in fills.items():
            text = text.replace(key, value)
        (base / "corpus").mkdir(exist_ok=True)
        (base / "corpus" / path.name).write_text(text)
        w["files"][path.stem] = base / "corpus" / path.name
    return w


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    """A world for the sandbox's run and one for the control's (their targets apart, so that what the control's
    attacks did is never taken for the sandbox's), with the same secret."""
    if landlock.abi_version() == 0:
        pytest.fail("Landlock is not available on this machine: the sandbox's tests need it (Linux >= 5.13)")
    secret = "sk-kfoundry-test-" + secrets.token_hex(12)
    made = {mode: _make_world(tmp_path_factory.mktemp(f"sandbox-world-{mode}"), secret) for mode in ("on", "off")}
    yield made
    for w in made.values():
        w["listener"].server.close()
        for leftover in Path(tempfile.gettempdir()).glob(w["tmp_target"].name + "*"):
            leftover.unlink()


@pytest.fixture(scope="module")
def world(worlds):
    return worlds["on"]


def _job(w: dict, mode: str, names: list[str], device: str) -> str:
    out = w["project"] / f"results-{mode}-{device}.json"
    return json.dumps([mode, str(w["cache"]), str(out), *(str(w["files"][name]) for name in names)])


def run_corpora(runs: list[tuple[dict, str, list[str]]], device: str = "cpu") -> list[dict]:
    """Each (world, sandbox mode, attack names) evaluated by an evaluator of its own, all in one process whose
    environment holds the API key, as `kfoundry` would (started in the first world's project folder)."""
    first = runs[0][0]
    env = {**os.environ, "OPENAI_API_KEY": first["secret"], "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-c", RUNNER, str(PROBLEM), device,
                           *(_job(w, mode, names, device) for w, mode, names in runs)],
                          cwd=first["project"], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads((w["project"] / f"results-{mode}-{device}.json").read_text()) for w, mode, _ in runs]


@pytest.fixture(scope="module")
def cpu_results(worlds) -> dict:
    """The whole corpus with the sandbox on, and beside it (one process: one start of torch and the evaluators'
    servers less) the control's attacks with it off."""
    on, off = run_corpora([(worlds["on"], "on", sorted(worlds["on"]["files"])),
                           (worlds["off"], "off", sorted(set(worlds["off"]["files"]) - NO_CONTROL))])
    return {"on": on, "off": off}


def test_the_sandbox_stops_every_attack(world, cpu_results):
    assert_all_blocked(world, cpu_results["on"], "cpu")


@pytest.mark.gpu
@pytest.mark.timeout(900)
def test_the_sandbox_stops_every_attack_on_a_gpu(world):
    """The same corpus in CUDA workers: the sandbox then also grants the GPU's device files, /dev/shm and the
    GPU lock's files, and none of that may open a door."""
    assert_all_blocked(world, run_corpora([(world, "on", sorted(world["files"]))], device="cuda")[0], "cuda")


def assert_all_blocked(world, results: dict, device: str) -> None:
    names = sorted(world["files"])
    assert len(names) >= 15
    for name in names:
        result = results[name]
        assert result["status"] == "runtime_error", (name, result["message"])
        assert world["secret"] not in json.dumps(result), name
        sandbox = result["sandbox"]
        assert sandbox["filesystem"].startswith("landlock ABI") and sandbox["network"].startswith("seccomp")
        assert not sandbox["missing"] and sandbox["dumpable"] is False
        if name == "cpp_host_attacks":
            outcomes = json.loads(outcome(result["message"]).replace(MASK, ""))
            assert outcomes.pop("read own status (control)").startswith("got:"), outcomes  # the C++ runs
            assert all(text.startswith("blocked") for text in outcomes.values()), outcomes
            cpp_child = int(outcomes["fork"].rsplit("child ", 1)[1].split()[0])
        else:
            assert outcome(result["message"]).startswith("blocked"), (name, result["message"])
    assert world["listener"].connections == 0
    # on a GPU the evaluator itself stores the baselines it measured there: only our own records, no forged one
    assert not list(world["cache"].rglob("*forged*"))
    assert device != "cpu" or not (world["cache"] / "baselines").exists()
    assert list(world["library"].iterdir()) == [] and list(world["run"].iterdir()) == []
    assert not list(Path(tempfile.gettempdir()).glob(world["tmp_target"].name + "*"))
    assert not list((ROOT / "src" / "kfoundry").glob("planted_by_*"))
    fork = outcome(results["py_fork_outlives"]["message"])
    assert "PermissionError" in fork  # setsid: denied
    child = int(fork.rsplit("child ", 1)[1].split()[0])
    assert not alive(child)  # it stayed in the worker's process group, which was killed with the worker
    assert not alive(cpp_child)  # forked from C++, in the worker's session: killed with it


def test_without_the_sandbox_the_same_attacks_work(worlds, cpu_results):
    world = worlds["off"]
    names = sorted(set(world["files"]) - NO_CONTROL)
    results = cpu_results["off"]
    try:
        for name in names:
            result = results[name]
            stopped_by = world["files"][name].read_text().splitlines()[0].split(":")[1].strip()
            text = outcome(result["message"])
            if stopped_by == "environment":  # the allow-list holds without the sandbox too
                assert text.startswith("blocked"), (name, text)
            else:
                assert text.startswith("got"), (name, text)
            assert any("sandbox is off" in w for w in result["warnings"])
        stolen = results["py_proc_environ"]["message"]
        assert f"OPENAI_API_KEY={MASK}" in stolen and world["secret"] not in stolen  # scrubbed on its way out
        assert world["listener"].connections >= 1
        # it got a session of its own (whether it outlived the worker then depends on the memory cgroup,
        # which kills all of its tasks where one could be made)
        assert outcome(results["py_fork_outlives"]["message"]).startswith("got: child ")
    finally:
        fork = outcome(results["py_fork_outlives"]["message"]) if "py_fork_outlives" in results else ""
        if "child " in fork:
            child = int(fork.rsplit("child ", 1)[1].split()[0])
            if alive(child):
                os.kill(child, signal.SIGKILL)
