"""--target-gpu / KFOUNDRY_TARGET_GPU / target_gpu: on a CPU run the prompts' device section shows the
named GPU's datasheet figures; an unknown name is a usage error (exit 2) naming the known ones."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from kfoundry.config import load_run_config, load_settings
from kfoundry.errors import UsageError
from kfoundry.evaluate.shared.device_facts import cpu_facts
from kfoundry.optimize.session import Session
from kfoundry.run_config import RunConfig
from kfoundry.search import Archipelago

from tests.test_cli import _reply_cmd, assert_clean_error, in_process


def test_the_setting_comes_from_the_command_line_the_environment_and_the_file(tmp_path):
    assert load_settings({}, env={}, cwd=tmp_path)["target_gpu"] is None
    run, settings = load_run_config({"target_gpu": "H200"}, env={}, cwd=tmp_path)
    assert run.search.target_gpu == "H200" and settings.sources["target_gpu"] == "command line"
    run, settings = load_run_config({}, env={"KFOUNDRY_TARGET_GPU": "l40s"}, cwd=tmp_path)
    assert run.search.target_gpu == "l40s" and settings.sources["target_gpu"] == "environment KFOUNDRY_TARGET_GPU"
    (tmp_path / "kfoundry.toml").write_text('target_gpu = "NVIDIA A100"\n')
    run, _ = load_run_config({}, env={}, cwd=tmp_path)
    assert run.search.target_gpu == "NVIDIA A100"
    assert RunConfig.from_dict(run.to_dict()).search.target_gpu == "NVIDIA A100"  # a resumed run keeps it


def _prompt(tmp_path: Path) -> str:
    return (tmp_path / "prompts.log").read_text()


def test_generate_on_cpu_shows_the_named_target_from_the_flag_or_the_environment(problems_dir, tmp_path,
                                                                                  monkeypatch):
    args = ("generate", problems_dir / "affine.py", "--llm", _reply_cmd(tmp_path, "affine_no_code.md"),
            "--device", "cpu", "--trials", "1", "-o", tmp_path / "cand.py")
    result = in_process(*args, "--target-gpu", "H200")
    assert result.returncode == 1, result.stdout + result.stderr  # the reply has no code: no candidate
    prompt = _prompt(tmp_path)
    assert "target GPU: NVIDIA H200 (compute capability 9.0); the figures below are its datasheet figures" in prompt
    assert "memory bandwidth (peak): 4800 GB/s" in prompt and "speed is not measured on this run" in prompt
    (tmp_path / "prompts.log").unlink()
    monkeypatch.setenv("KFOUNDRY_TARGET_GPU", "rtx 4090")
    in_process(*args)
    prompt = _prompt(tmp_path)
    assert "target GPU: NVIDIA GeForce RTX 4090 (compute capability 8.9)" in prompt
    assert "shared memory per block (opt-in max): 99 KiB (101376 bytes)" in prompt


def test_an_unknown_target_exits_2_naming_the_known_ones(problems_dir, tmp_path):
    for command in (("generate", problems_dir / "affine.py", "--llm", "cmd:cat"),
                    ("optimize", problems_dir / "affine.py", "-o", tmp_path / "run")):
        result = in_process(*command, "--device", "cpu", "--target-gpu", "H20")
        assert_clean_error(result, "bad value 'H20' for target_gpu")
        assert "NVIDIA H200" in result.stderr
    assert not (tmp_path / "run").exists()
    from kfoundry.generate import generate

    with pytest.raises(UsageError, match="unknown target GPU 'H20'"):  # the API checks it before any work
        generate(problems_dir / "affine.py", None, target_gpu="H20")


def test_optimize_s_llm_experts_get_the_target_s_facts_on_cpu(tmp_path):
    config = RunConfig()
    config.search.target_gpu = "h100 pcie"
    session = Session(problem=tmp_path / "p.py", store=SimpleNamespace(run_dir=tmp_path), config=config,
                      llm=SimpleNamespace())
    experts = session.experts(problem_source="", name="p", device=cpu_facts(), experience=[],
                              archipelago=Archipelago(k=1), left_over=[], preferred={})
    contexts = [e.context for e in experts if hasattr(e, "context")]
    assert contexts and all(c.device.name == "NVIDIA H100 PCIe" and c.device.sm_count == 114 for c in contexts)
    tuner = [e for e in experts if e.name == "tuner"][0]
    assert tuner.device.name == "NVIDIA H100 PCIe"  # its variants fit the target's shared memory and registers
