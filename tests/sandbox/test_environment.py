"""Evaluation processes get an environment built from an allow-list, and the parent's import path."""

import json
import os
import sys

from kfoundry.sandbox.environment import (IMPORT_PATH_ENV, SYS_PATH_ENV, evaluation_environment, extend_sys_path,
                                          looks_secret, missing_entries)


def test_only_allowed_names_pass_and_never_one_named_like_a_secret():
    base = {
        "OPENAI_API_KEY": "sk-1", "HF_TOKEN": "hf_1", "AWS_SECRET_ACCESS_KEY": "a", "DB_PASSWORD": "p",
        "MY_SERVICE_URL": "https://user:pw@host", "SOMETHING_ELSE": "x", "KFOUNDRY_CACHE_DIR": "/c",
        "PATH": "/usr/bin", "LC_ALL": "C", "CUDA_VISIBLE_DEVICES": "0", "TRITON_INTERPRET": "1",
        "KFOUNDRY_WORKER_LABEL": "candidate", "TRITON_CACHE_DIR": "/t", "CUDA_HOME_TOKEN": "t",
    }
    assert evaluation_environment(base) == {"PATH": "/usr/bin", "LC_ALL": "C", "CUDA_VISIBLE_DEVICES": "0",
                                            "TRITON_INTERPRET": "1", "KFOUNDRY_WORKER_LABEL": "candidate",
                                            "TRITON_CACHE_DIR": "/t"}
    assert looks_secret("anthropic_api_key") and not looks_secret("PATH")


def test_defaults_to_this_process(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-passed")
    monkeypatch.setenv("LANG", "C.UTF-8")
    env = evaluation_environment()
    assert "OPENAI_API_KEY" not in env and env["LANG"] == "C.UTF-8"


def _site_with_pth(tmp_path):
    """A site folder whose .pth file adds another folder, each holding a module."""
    site_dir, added = tmp_path / "site", tmp_path / "added"
    site_dir.mkdir()
    added.mkdir()
    (site_dir / "kf_env_site_mod.py").write_text("X = 1\n")
    (site_dir / "more.pth").write_text(str(added) + "\n")
    (added / "kf_env_added_mod.py").write_text("Y = 2\n")
    return site_dir, added


def test_a_process_gets_the_parents_entries_it_lacks_then_the_problems_folder_first(tmp_path, monkeypatch):
    site_dir, added = _site_with_pth(tmp_path)
    plain, problem = tmp_path / "plain", tmp_path / "problem"
    plain.mkdir()
    problem.mkdir()
    monkeypatch.setattr(sys, "path", ["/already"])
    env = {SYS_PATH_ENV: json.dumps([{"path": str(site_dir), "site": True}, {"path": str(added), "site": False},
                                     {"path": str(plain), "site": False}, {"path": "/already", "site": False}]),
           IMPORT_PATH_ENV: json.dumps([str(problem)])}
    extend_sys_path(env)
    # the site folder's .pth counted (as in the parent), nothing twice, the problem's folder first
    assert sys.path == [str(problem), "/already", str(site_dir), str(added), str(plain)]
    extend_sys_path(env)  # a forked worker repeats its server's
    assert sys.path == [str(problem), "/already", str(site_dir), str(added), str(plain)]


def test_garbage_in_the_variables_changes_nothing(monkeypatch):
    monkeypatch.setattr(sys, "path", ["/x"])
    extend_sys_path({SYS_PATH_ENV: "not json", IMPORT_PATH_ENV: '{"a": 1}'})
    extend_sys_path({SYS_PATH_ENV: '[3, {"path": 4}]', IMPORT_PATH_ENV: "[5]"})
    assert sys.path == ["/x"]


def test_missing_entries_are_the_parents_entries_a_fresh_interpreter_lacks(tmp_path, monkeypatch):
    """A real fresh interpreter with the given environment: what it has itself (PYTHONPATH, the stdlib, the
    venv) is not repeated; what this process added at run time is, in order; problems' folders and folders
    that do not exist are left out."""
    on_pythonpath, added, problem = tmp_path / "pp", tmp_path / "added", tmp_path / "problem"
    for folder in (on_pythonpath, added, problem):
        folder.mkdir()
    monkeypatch.setattr(sys, "path", [*sys.path, str(on_pythonpath), str(added), str(problem), str(tmp_path / "gone")])
    env = {"PYTHONPATH": str(on_pythonpath), "PATH": os.environ.get("PATH", "")}
    entries = missing_entries(env, leave_out=[str(problem)])
    paths = [e["path"] for e in entries]
    assert str(added) in paths and str(on_pythonpath) not in paths and str(problem) not in paths
    assert str(tmp_path / "gone") not in paths
    assert not [p for p in paths if p.startswith(sys.base_prefix + os.sep)]  # the stdlib: every interpreter's
    assert all(e["site"] is False for e in entries if e["path"] == str(added))
