"""kfoundry.sandbox.probe: the sandbox's parts and torch inside it, from a fresh restricted child; and
scripts/sandbox_check.py, its command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kfoundry.sandbox.probe import probe

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "sandbox_check.py"


def test_the_probe_reports_what_held_and_that_torch_runs_inside():
    result = probe()
    assert "sandbox" in result and result["torch"] and result["cuda"] == "no GPU", result
    left_out = probe(skip=["seccomp"])
    assert any("seccomp" in part and "skipped by --skip" in part for part in left_out["sandbox"]["missing"])


def test_the_script_still_prints_the_probe_as_json():
    done = subprocess.run([sys.executable, str(SCRIPT), "--skip", "landlock"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["sandbox"]["filesystem"] is None and report["torch"]
