"""A candidate worker's sandbox as kfoundry.sandbox.policy builds it, applied in a real child process:
its own folder and the GPU lock work, the project it was started from and the rest of /tmp do not; the
import path (the problem's folder, PYTHONPATH) reads, what is private in it does not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kfoundry.sandbox import policy
from kfoundry.sandbox.policy import SandboxReport

ROOT = Path(__file__).resolve().parents[2]
CHILD = r"""
import fcntl, json, os, sys
from pathlib import Path
from kfoundry.sandbox import policy
report = policy.apply(Path.cwd(), gpu=False)
out = {"report": report.to_dict()}
def attempt(name, action):
    try:
        action()
        out[name] = "ok"
    except OSError as exc:
        out[name] = type(exc).__name__
attempt("own folder", lambda: Path("made.txt").write_text("x"))
attempt("own proc", lambda: Path(f"/proc/{os.getpid()}/status").read_text())
attempt("gpu lock", lambda: fcntl.flock(os.open(os.environ["KFOUNDRY_GPU_LOCK"], os.O_RDWR), fcntl.LOCK_SH))
attempt("timeline", lambda: open(os.environ["KFOUNDRY_GPU_TIMELINE"], "a").write("{}\n"))
attempt("project config", lambda: Path(sys.argv[1]).read_text())
attempt("project listing", lambda: os.listdir(Path(sys.argv[1]).parent))
attempt("parent environ", lambda: Path(f"/proc/{os.getppid()}/environ").read_bytes())
attempt("import torch-free package", lambda: __import__("kfoundry.sandbox.secrets"))
print(json.dumps(out))
"""


def test_a_worker_keeps_its_folder_and_the_lock_and_loses_the_project(tmp_path):
    project, work = tmp_path / "project", tmp_path / "work"
    project.mkdir()
    work.mkdir()
    config = project / "kfoundry.toml"
    config.write_text('[keys]\nopenai = "sk-not-for-candidates"\n')
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "KFOUNDRY_GPU_LOCK": str(tmp_path / "gpu.lock"),
           "KFOUNDRY_GPU_TIMELINE": str(tmp_path / "timeline.jsonl"), "KFOUNDRY_PARENT_CWD": str(project)}
    done = subprocess.run([sys.executable, "-c", CHILD, str(config)], cwd=work, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    report = SandboxReport(**out.pop("report"))
    assert report.complete and report.filesystem.startswith("landlock") and report.dumpable is False
    assert out == {"own folder": "ok", "own proc": "ok", "gpu lock": "ok", "timeline": "ok",
                   "project config": "PermissionError", "project listing": "PermissionError",
                   "parent environ": "PermissionError", "import torch-free package": "ok"}
    assert (work / "made.txt").exists() and (tmp_path / "gpu.lock.turnstile").exists()


def test_a_gpu_worker_whose_folder_lies_in_dev_shm_is_reported_incomplete(tmp_path):
    # a GPU worker must keep /dev/shm writable (CUDA IPC), so a folder of ours there would be every candidate's
    if not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK):
        pytest.skip("this machine has no writable /dev/shm")
    child = ("import json; from pathlib import Path; from kfoundry.sandbox import policy; "
             "print(json.dumps(policy.apply(Path.cwd(), gpu=True).to_dict()))")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="kfoundry-test-") as inside:
        done = subprocess.run([sys.executable, "-c", child], cwd=inside, env=env, capture_output=True, text=True,
                              timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    report = SandboxReport(**json.loads(done.stdout))
    assert not report.complete
    assert [m for m in report.missing if m.startswith("folders:") and "KFOUNDRY_WORK_DIR" in m]
    outside = subprocess.run([sys.executable, "-c", child], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=60)
    assert outside.returncode == 0, outside.stderr[-2000:]
    assert not [m for m in json.loads(outside.stdout)["missing"] if m.startswith("folders:")]


def test_dev_shm_is_open_to_a_gpu_worker_for_cuda_ipc_and_closed_under_strict(tmp_path):
    if not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK):
        pytest.skip("this machine has no writable /dev/shm")
    child = (
        "import json, os, sys; from pathlib import Path; from kfoundry.sandbox import policy\n"
        "report = policy.apply(Path.cwd(), gpu=True, shared_memory=sys.argv[1] == 'open').to_dict()\n"
        "path = f'/dev/shm/kfoundry-test-{os.getpid()}'\n"
        "try:\n"
        "    Path(path).write_text('x'); os.unlink(path); outcome = 'ok'\n"
        "except OSError as exc:\n"
        "    outcome = type(exc).__name__\n"
        "print(json.dumps({'report': report, 'write': outcome}))\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    seen = {}
    for mode in ("open", "closed"):
        done = subprocess.run([sys.executable, "-c", child, mode], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
        seen[mode] = json.loads(done.stdout)
    assert seen["open"]["write"] == "ok" and "/dev/shm writable (CUDA IPC)" in seen["open"]["report"]["filesystem"]
    assert seen["closed"]["write"] == "PermissionError" and "/dev/shm" not in seen["closed"]["report"]["filesystem"]


# -- the import path: read rules, private paths left out (no Landlock needed: worker_rules returns them) --------

def _tree(root: Path, files: list[str]) -> Path:
    for name in files:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if not name.endswith("/"):
            path.write_text("X = 1\n")
    return root


def _rules(tmp_path: Path, import_path: list[Path], private: list[Path] | None = None, workdir: Path | None = None):
    workdir = workdir or tmp_path / "work" / "kfoundry-candidate-self"
    workdir.mkdir(parents=True, exist_ok=True)
    return policy.worker_rules(workdir, gpu=False, import_path=[str(p) for p in import_path],
                               private=policy.Private([str(p) for p in private or []],
                                                      others=[str(workdir.parent / "kfoundry-*")]))


def test_a_folder_of_the_import_path_with_nothing_private_is_granted_whole(tmp_path):
    project = _tree(tmp_path / "project", ["problem.py", "mylayers/__init__.py"])
    rules = _rules(tmp_path, [project])
    assert str(project) in rules.read and not rules.listing and not rules.notes


def test_a_folder_holding_something_private_is_granted_entry_by_entry(tmp_path):
    project = _tree(tmp_path / "project", [
        "problem.py", "mylayers/__init__.py", "kfoundry.toml", ".env", "library.sqlite", "library.sqlite-wal",
        "myrun/run.sqlite", "myrun/best.py", "mybench/bench.json", "cache/key", "data/deep/secret/x",
        "data/deep/open.txt", "data/top.txt"])
    rules = _rules(tmp_path, [project], private=[project / "cache", project / "data" / "deep" / "secret"])
    granted = {os.path.relpath(p, project) for p in rules.read if p.startswith(str(project) + os.sep)}
    assert granted == {"problem.py", "mylayers", "data/top.txt", "data/deep/open.txt"}
    assert str(project) not in rules.read
    # listable, so that Python's import finds the entries: names only, nothing in a private entry reads
    assert set(rules.listing) == {str(project), str(project / "data"), str(project / "data" / "deep")}
    assert not rules.notes  # left out on purpose: nothing to warn of


def test_an_entry_inside_a_private_path_is_not_granted_and_says_so(tmp_path):
    cache = _tree(tmp_path / "cache", ["pkgs/mod.py"])
    runs = _tree(tmp_path / "runs", ["r1/run.sqlite"])
    elsewhere = _tree(tmp_path / "mine", ["run.sqlite", "problem.py", "sub/mod.py"])  # a run's folder (-o)
    rules = _rules(tmp_path, [cache / "pkgs", runs / "r1", elsewhere, elsewhere / "sub"],
                   private=[cache, tmp_path / "runs"])
    assert not [p for p in rules.read if p.startswith(str(tmp_path))]
    assert len(rules.notes) == 4 and all("not readable by candidates" in note for note in rules.notes)
    assert str(cache) in rules.notes[0] and str(runs) in rules.notes[1] and str(elsewhere) in rules.notes[3]


def test_other_evaluations_folders_are_left_out_and_a_link_into_a_private_path_too(tmp_path):
    work = tmp_path / "work"
    _tree(work, ["kfoundry-judge-abc/stderr.log", "kfoundry-exchange-def/init_inputs.pt", "shared/mod.py"])
    (work / "to-cache").symlink_to(_tree(tmp_path / "cache", ["key"]))
    rules = _rules(tmp_path, [work], private=[tmp_path / "cache"])
    own = work / "kfoundry-candidate-self"
    assert str(work / "shared") in rules.read
    assert not [p for p in rules.read if "kfoundry-" in p or "cache" in p]
    assert str(own) in rules.write and str(work) in rules.listing


def test_the_entry_by_entry_rules_are_bounded_and_what_is_left_out_is_said(tmp_path, monkeypatch):
    monkeypatch.setattr(policy, "SPLIT_LIMIT", 5)
    project = _tree(tmp_path / "project", ["kfoundry.toml", "pkg/__init__.py", *[f"data{i}.txt" for i in range(8)]])
    rules = _rules(tmp_path, [project])
    granted = [p for p in rules.read if p.startswith(str(project) + os.sep)]
    assert len(granted) == 5 and str(project / "pkg") in granted  # what an import needs, first
    assert len(rules.notes) == 1 and "4 entries not readable by candidates" in rules.notes[0]


def test_the_parent_knows_its_private_paths(tmp_path, monkeypatch):
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    (project / "kfoundry.toml").write_text('library = "libs/mine.sqlite"\n')
    monkeypatch.chdir(project)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("KFOUNDRY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KFOUNDRY_LIBRARY", str(tmp_path / "elsewhere.sqlite"))
    private = policy.private_paths([tmp_path / "evaluator-cache"])
    real = os.path.realpath(tmp_path)
    expected = {"cache", "evaluator-cache", "elsewhere.sqlite*", "project/libs/mine.sqlite*", "project/runs",
                "project/bench-*", "project/kfoundry.toml", "home/.ssh", "home/.aws", "home/.netrc", "home/.config"}
    assert expected <= {os.path.relpath(p, real) for p in private}


def test_path_entries_under_the_home_or_the_parents_folder_stay_closed(tmp_path, monkeypatch):
    home, project, tools = tmp_path / "home", tmp_path / "project", tmp_path / "tools"
    for folder in (home / "bin", project / "bin", tools / "bin"):
        folder.mkdir(parents=True)
    monkeypatch.setattr(policy, "_real_home", lambda: str(home))
    monkeypatch.setenv("KFOUNDRY_PARENT_CWD", str(project))
    monkeypatch.setenv("PATH", os.pathsep.join(str(f / "bin") for f in (home, project, tools)))
    rules = _rules(tmp_path, [])
    assert str(tools / "bin") in rules.read
    assert not {str(home / "bin"), str(project / "bin")} & set(rules.read)


CHILD_IMPORTS = r"""
import json, os, sys
from pathlib import Path
from kfoundry.sandbox import environment, policy
environment.extend_sys_path()
report = policy.apply(Path.cwd(), gpu=False)
out = {"report": report.to_dict(), "first": sys.path[0]}
project = Path(os.environ["KFOUNDRY_WORKER_IMPORT_PATH"].strip('[]"'))
def attempt(name, action):
    try:
        action()
        out[name] = "ok"
    except (OSError, ImportError) as exc:
        out[name] = type(exc).__name__
attempt("import sibling", lambda: __import__("kf_policy_layers"))
attempt("import from PYTHONPATH", lambda: __import__("kf_policy_dep"))
attempt("list the project", lambda: os.listdir(project))
attempt("read the config", lambda: (project / "kfoundry.toml").read_text())
attempt("read the cache", lambda: (project / "cache" / "key").read_text())
attempt("read the run", lambda: (project / "runs" / "r1" / "best.py").read_text())
attempt("write the project", lambda: (project / "planted.py").write_text("x"))
attempt("read another worker's folder", lambda: (project.parent / "kfoundry-judge-x" / "stderr.log").read_text())
print(json.dumps(out))
"""


def test_a_worker_reads_the_import_path_and_nothing_private_in_it(tmp_path):
    from kfoundry.sandbox import landlock

    if landlock.abi_version() == 0:
        pytest.skip("Landlock is not available here: what it would enforce is tested without it above")
    project = _tree(tmp_path / "project", ["kf_policy_layers/__init__.py", "kfoundry.toml", "cache/key",
                                           "runs/r1/best.py", "runs/r1/run.sqlite"])
    deps = _tree(tmp_path / "deps", ["kf_policy_dep.py"])
    _tree(tmp_path, ["kfoundry-judge-x/stderr.log"])
    work = tmp_path / "kfoundry-candidate-self"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(deps)]),
           "KFOUNDRY_WORKER_IMPORT_PATH": json.dumps([str(project)]),
           policy.PRIVATE_ENV: json.dumps([str(project / "cache")])}
    done = subprocess.run([sys.executable, "-c", CHILD_IMPORTS], cwd=work, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out.pop("report")["filesystem"].startswith("landlock")
    assert out == {"first": str(project), "import sibling": "ok", "import from PYTHONPATH": "ok",
                   "list the project": "ok", "read the config": "PermissionError", "read the cache": "PermissionError",
                   "read the run": "PermissionError", "write the project": "PermissionError",
                   "read another worker's folder": "PermissionError"}
