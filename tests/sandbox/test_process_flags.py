"""The dumpable flag on the real kernel, in child processes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
NOBODY = 65534

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux-only")

FLAGS = r"""
import json
from kfoundry.sandbox import process_flags
before = process_flags.is_dumpable()
made = process_flags.make_non_dumpable()
print(json.dumps({"before": before, "made": made, "after": process_flags.is_dumpable()}))
"""

# A forked child turns into `nobody` (which clears the flag: set it again, for the control), then
# is made non-dumpable or not; another `nobody` process tries to read its environment.
ENVIRON = r"""
import ctypes, json, os, subprocess, sys
from kfoundry.sandbox import process_flags
nobody, protect = int(sys.argv[1]), sys.argv[2] == "protect"
ready_r, ready_w = os.pipe()
done_r, done_w = os.pipe()
pid = os.fork()
if pid == 0:
    os.setgroups([])
    os.setgid(nobody)
    os.setuid(nobody)
    ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE, 1
    if protect:
        process_flags.make_non_dumpable()
    os.write(ready_w, b"1" if process_flags.is_dumpable() else b"0")
    os.read(done_r, 1)
    os._exit(0)
dumpable = os.read(ready_r, 1) == b"1"
cat = subprocess.run(["/bin/cat", f"/proc/{pid}/environ"], capture_output=True, user=nobody, group=nobody,
                     extra_groups=[])
os.write(done_w, b"x")
os.waitpid(pid, 0)
print(json.dumps({"dumpable": dumpable, "rc": cat.returncode, "marker_seen": b"kf-marker-value" in cat.stdout,
                  "err": cat.stderr.decode()}))
"""


def run_child(code: str, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(SRC), "KF_TEST_MARKER": "kf-marker-value"}
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=30)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_make_non_dumpable():
    assert run_child(FLAGS) == {"before": True, "made": True, "after": False}


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to run the two processes as another user")
def test_same_user_cannot_read_the_environment():
    control = run_child(ENVIRON, str(NOBODY), "control")
    assert control["dumpable"] is True
    assert control["rc"] == 0 and control["marker_seen"], control

    protected = run_child(ENVIRON, str(NOBODY), "protect")
    assert protected["dumpable"] is False
    assert protected["rc"] != 0 and not protected["marker_seen"]
    assert "Permission denied" in protected["err"]
