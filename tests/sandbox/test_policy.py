"""A candidate worker's sandbox as kfoundry.sandbox.policy builds it, applied in a real child process:
its own folder and the GPU lock work, the project it was started from and the rest of /tmp do not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

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
