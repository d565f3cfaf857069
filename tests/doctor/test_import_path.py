"""kfoundry.doctor.import_path: each import path entry readable by a worker, checked from the parent."""

from __future__ import annotations

import sys

from kfoundry.doctor.import_path import check_import_path, import_path, worker_packages


def test_the_workers_packages_are_read_from_kfoundrys_sources():
    packages = worker_packages()
    assert "torch" in packages
    assert "kfoundry" not in packages and not packages & set(sys.stdlib_module_names)


def test_this_machines_import_path_is_readable():
    check = check_import_path()
    assert check.ok and check.detail.startswith(f"all {len(import_path())} entries readable"), check.text()


def test_an_entry_the_sandbox_does_not_grant_is_a_problem_with_its_fix(tmp_path, monkeypatch):
    """An entry inside kfoundry's cache folder (its baseline cache key is there: private to candidates) is
    one the candidates' sandbox never lets a worker read."""
    monkeypatch.setenv("KFOUNDRY_CACHE_DIR", str(tmp_path / "cache"))
    entry = tmp_path / "cache" / "site-packages"
    entry.mkdir(parents=True)
    (entry / "kf_doctor_module.py").write_text("VALUE = 1\n")
    check = check_import_path("on", [str(entry)])
    assert not check.ok and not check.fatal  # a risk: only code that imports from it fails
    assert check.detail.startswith(f"1 of 1 entries cannot be read by a worker: {entry} (outside what the "
                                   "candidates' sandbox lets a worker read)")
    assert check.fix.startswith("make them readable to kfoundry's workers")
    assert "fix: make them readable" in check.text()
    # without the sandbox this user reads it
    assert check_import_path("off", [str(entry)]).ok
