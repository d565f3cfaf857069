"""The `kfoundry` commands: output, --json, exit codes 0/1/2.

A few run the command for real in a process of its own (the console script itself, `eval` with its
output to a pipe, the whole of `optimize`); the others run the same command in this process
(`in_process`), where the evaluator's workers still are processes of their own but are forked from
the servers the suite has already started, rather than from two new ones that import torch and
Triton again for each test."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

KFOUNDRY = Path(sys.executable).with_name("kfoundry")
TESTS_DIR = Path(__file__).resolve().parent


def kfoundry(*args, timeout: float = 180) -> subprocess.CompletedProcess:
    """Run the console script; `eval` runs get --device cpu unless the test gives a device."""
    if not KFOUNDRY.exists():
        pytest.fail(f"the console script {KFOUNDRY} is not installed (pip install -e .)")
    if args and args[0] == "eval" and "--device" not in args:
        args = (*args, "--device", "cpu")
    env = dict(os.environ, COLUMNS="200")  # rich wraps at 80 columns without a terminal
    return subprocess.run([str(KFOUNDRY), *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)


def in_process(*args) -> subprocess.CompletedProcess:
    """The same command as `kfoundry(*args)`, run in this process through typer's test runner; an
    exception that is not an exit is raised here, so a traceback cannot hide behind an exit code."""
    from typer.testing import CliRunner

    from kfoundry import cli

    if args and args[0] == "eval" and "--device" not in args:
        args = (*args, "--device", "cpu")
    args = [str(a) for a in args]
    width = cli.err.width
    cli.err.width = 200  # as COLUMNS=200 gives the subprocess: rich wraps at 80 columns without a terminal
    try:
        result = CliRunner().invoke(cli.app, args, env={"COLUMNS": "200"})
    finally:
        cli.err.width = width
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(["kfoundry", *args], result.exit_code, result.stdout, result.stderr)


def single_json_object(stdout: str) -> dict:
    """The whole of stdout is exactly one JSON object."""
    text = stdout.strip()
    data, end = json.JSONDecoder().raw_decode(text)
    assert text[end:].strip() == "", f"more than one JSON value on stdout: {text[end:][:200]!r}"
    assert isinstance(data, dict)
    return data


def assert_clean_error(result: subprocess.CompletedProcess, expected: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "error:" in result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_help_lists_eval():
    result = kfoundry("--help")
    assert result.returncode == 0
    assert "eval" in result.stdout


def test_version_names_kfoundry_torch_and_triton():
    result = in_process("--version")
    assert result.returncode == 0
    assert re.match(r"kfoundry \d+\.\d+\.\d+ \(torch \S+, triton \S+, Python 3\.\d+", result.stdout), result.stdout


def test_report_on_a_folder_that_is_no_run_says_so(tmp_path):
    result = in_process("report", tmp_path)
    assert_clean_error(result, "is not a run folder")
    assert "resume" not in result.stderr


def test_the_command_line_and_its_help_do_not_import_torch():
    """`kfoundry --help` (and every command's start) loads no torch: the commands import it when they run."""
    code = "import sys, kfoundry.cli; print(sorted(m for m in ('torch', 'triton') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_eval_ok_human_output(problems_dir, candidates_dir):
    result = in_process("eval", problems_dir / "affine.py", candidates_dir / "affine_ok.py", "--trials", "2",
                        "--seed", "3")
    assert result.returncode == 0, result.stdout + result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith("ok  correct on 2 trials (fp32, atol=rtol=0.0001")
    assert "trials passed" in result.stdout and "2 of 2 (seed 3)" in result.stdout
    assert "timing: no GPU" in result.stdout
    # an affine map is pointwise: the flop counter counts none of it, which is not "0 FLOPs"
    assert "problem cost: FLOPs not counted (pointwise ops" in result.stdout and "0 FLOPs" not in result.stdout


@pytest.fixture(scope="module")
def eval_for_real(problems_dir, candidates_dir, tmp_path_factory):
    """`kfoundry eval` run for real once, in a process of its own with stdout and stderr pipes (as in a log): what it
    printed, and the modules its main process had imported on its way out (REPORT_MODULES)."""
    out = tmp_path_factory.mktemp("eval-for-real") / "modules.json"
    done = subprocess.run([sys.executable, "-c", REPORT_MODULES, str(out), "eval", str(problems_dir / "affine.py"),
                           str(candidates_dir / "affine_ok.py"), "--device", "cpu", "--trials", "1"],
                          capture_output=True, text=True, timeout=180, env=dict(os.environ, COLUMNS="200"))
    return done, (json.loads(out.read_text()) if out.exists() else None)


def test_eval_without_a_terminal_prints_a_line_per_phase(eval_for_real):
    # stderr is a pipe here, as in a log: a spinner would print nothing there
    result, _ = eval_for_real
    assert result.returncode == 0, result.stdout + result.stderr
    phases = [line.split("] ", 1)[1] for line in result.stderr.splitlines() if re.match(r"\[ *\d+\.\d s\] ", line)]
    assert phases[0] == "evaluating", result.stderr
    assert any(p.startswith("reference") for p in phases) and any(p.startswith("candidate") for p in phases)
    assert result.stdout.startswith("ok  correct on 1 trials")  # the report itself stays on stdout


# `kfoundry eval` itself, then what it imported (on its way out, whatever its exit): argv[1] is the file for it
REPORT_MODULES = """import json, sys
from kfoundry.cli import main
out = sys.argv.pop(1)
sys.argv[0] = "kfoundry"
try:
    main()
finally:
    with open(out, "w") as f:
        json.dump(sorted(sys.modules), f)
"""
# the LLM stack (SDKs, retries, providers) and the experience library's retrieval; the configuration's LLM
# settings and the library's command-line mount are neither
EVAL_MUST_NOT_IMPORT = (
    "tenacity", "openai", "anthropic", "httpx", "bm25s", "jax", "jaxlib", "sentence_transformers",
    "kfoundry.llm.provider", "kfoundry.llm.openai_provider", "kfoundry.llm.anthropic_provider",
    "kfoundry.llm.cmd_provider", "kfoundry.llm.replay", "kfoundry.llm.record", "kfoundry.llm.ensemble",
    "kfoundry.llm.budget", "kfoundry.llm.retry", "kfoundry.llm.sdk_errors", "kfoundry.llm.specs",
    "kfoundry.library.store", "kfoundry.library.text_index", "kfoundry.library.embeddings",
)


def test_eval_imports_neither_the_llm_stack_nor_the_library(eval_for_real):
    """The main process of `kfoundry eval`, run for real: a broken LLM SDK or retrieval library must not stop it."""
    done, modules = eval_for_real
    assert done.returncode == 0, done.stdout + done.stderr
    assert "kfoundry.evaluate.parent.evaluator" in modules  # it did evaluate, in this process
    found = sorted(m for m in modules if any(m == name or m.startswith(name + ".") for name in EVAL_MUST_NOT_IMPORT))
    assert not found, f"kfoundry eval imported {found}"


def test_eval_json_wrong_output(problems_dir, candidates_dir):
    result = in_process("eval", problems_dir / "affine.py", candidates_dir / "wrong_constant.py", "--trials", "2",
                        "--seed", "5", "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    data = single_json_object(result.stdout)
    assert set(data) >= {"status", "message", "correctness", "timing"}
    assert data["status"] == "wrong_output"
    assert "values off" in data["message"] and data["message"].endswith("[reproduce with --seed 5]")
    assert data["settings"]["seed"] == 5
    assert len(data["correctness"]["seeds"]) == 2
    assert data["correctness"]["max_abs_error"] > 1e-3
    assert data["timing"]["runtime_ms"] is None


def test_eval_compile_error_human_output(problems_dir, candidates_dir):
    result = in_process("eval", problems_dir / "affine.py", candidates_dir / "syntax_error.py", "--trials", "1")
    assert result.returncode == 1
    assert result.stdout.startswith("compile_error  syntax error at ")
    assert "syntax_error.py:12: expected ':'" in result.stdout
    assert "Diagnosis: compile_error (next focus: repair)" in result.stdout  # under the verdict
    assert "error [syntax]" in result.stdout and "###" not in result.stdout and "**" not in result.stdout


def test_eval_with_set_and_eval_mode(problems_dir, candidates_dir):
    result = in_process("eval", problems_dir / "batchnorm.py", candidates_dir / "batchnorm_running_stats.py",
                        "--trials", "1", "--set", "num_features=8", "--set", "batch_size=4", "--eval-mode", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    data = single_json_object(result.stdout)
    assert data["status"] == "ok"
    assert data["settings"]["set"] == {"num_features": 8, "batch_size": 4}
    assert data["settings"]["eval_mode"] is True
    assert data["cost"]["input_bytes"] == 4 * 8 * 4


@pytest.mark.parametrize(
    "name, expected",
    [
        ("does_not_exist.py", "problem file not found"),
        (".", "is a folder: give the problem's .py file"),
        ("syntax_error.py", "line 9: expected ':'"),
        ("no_model.py", "missing Model"),
        ("no_get_init_inputs.py", "missing get_init_inputs"),
        ("get_inputs_raises.py", "get_inputs() of the problem raised RuntimeError"),
    ],
)
def test_bad_problem_exits_2(problems_dir, candidates_dir, name, expected):
    result = in_process("eval", problems_dir / "bad" / name, candidates_dir / "affine_ok.py", "--trials", "1")
    assert_clean_error(result, expected)


def test_bad_problem_with_json_prints_one_error_object(problems_dir, candidates_dir):
    result = in_process("eval", problems_dir / "bad" / "no_model.py", candidates_dir / "affine_ok.py", "--json")
    assert result.returncode == 2
    data = single_json_object(result.stdout)
    assert data["status"] == "error"
    assert "missing Model" in data["message"]


def test_missing_candidate_exits_2(problems_dir, candidates_dir):
    result = in_process("eval", problems_dir / "affine.py", candidates_dir / "does_not_exist.py")
    assert_clean_error(result, "candidate file not found")


def test_bf16_on_cpu_exits_2(problems_dir, candidates_dir):
    result = in_process("eval", problems_dir / "affine.py", candidates_dir / "affine_ok.py",
                        "--precision", "bf16", "--device", "cpu")
    assert_clean_error(result, "bf16 on CPU is refused")
    assert "fp32 or fp16" in result.stderr


@pytest.mark.parametrize(
    "item, expected",
    [
        ("hidden=3", "has no module-level constant 'hidden'"),
        ("3d=1", "--set expects NAME=VALUE"),
    ],
)
def test_bad_set_exits_2(problems_dir, candidates_dir, item, expected):
    result = in_process("eval", problems_dir / "affine.py", candidates_dir / "affine_ok.py", "--set", item)
    assert_clean_error(result, expected)


def test_eval_cheating_names_the_rule(problems_dir, fixtures_dir):
    result = in_process("eval", problems_dir / "affine.py", fixtures_dir / "guard" / "cheat_torch_compute.py",
                        "--device", "cpu")
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith("cheating")
    assert "[torch-compute]" in result.stdout  # rule names in brackets survive the terminal markup
    assert "instead: move the computation into your own Triton/CUDA kernel" in result.stdout


def test_eval_permissive_policy_warns(problems_dir, fixtures_dir):
    result = in_process("eval", problems_dir / "affine.py", fixtures_dir / "guard" / "cheat_torch_compute.py",
                        "--device", "cpu", "--policy", "permissive", "--trials", "1", "--json")
    data = single_json_object(result.stdout)
    assert result.returncode == 0 and data["status"] == "ok", data["message"]
    assert {w["rule"] for w in data["guard"]["warnings"]} >= {"torch-compute", "aten-compute"}


def test_eval_unknown_policy_exits_2(problems_dir, candidates_dir, monkeypatch):
    result = in_process("eval", problems_dir / "affine.py", candidates_dir / "affine_ok.py", "--policy", "lax")
    assert result.returncode == 2 and "'lax' is not one of 'strict', 'permissive'" in result.stderr
    monkeypatch.setenv("KFOUNDRY_POLICY", "lax")  # the environment is not checked by the option's choices
    result = in_process("eval", problems_dir / "affine.py", candidates_dir / "affine_ok.py")
    assert_clean_error(result, "unknown policy 'lax'")


def test_diagnose_prints_only_the_diagnosis_as_plain_text_when_piped(problems_dir, candidates_dir):
    result = in_process("diagnose", problems_dir / "affine.py", candidates_dir / "missing_tail.py", "--trials", "1",
                        "--seed", "4", "--policy", "permissive")
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "Diagnosis: wrong_output (next focus: repair)"
    assert "1. error [wrong-values]" in result.stdout
    assert "###" not in result.stdout and "**" not in result.stdout
    assert "tail" in result.stdout and "triton.cdiv" in result.stdout
    assert "correctness" not in lines  # no tables: the diagnosis alone


def test_diagnose_json_and_max_chars(problems_dir, candidates_dir):
    result = in_process("diagnose", problems_dir / "affine.py", candidates_dir / "affine_ok.py", "--trials", "1",
                        "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    data = single_json_object(result.stdout)
    assert data["status"] == "ok" and data["focus"] == "none" and data["bound"] is None
    assert data["findings"][0]["category"] and "direction" in data["findings"][0]
    short = in_process("diagnose", problems_dir / "affine.py", candidates_dir / "missing_tail.py", "--trials", "1",
                       "--max-chars", "300")
    assert "left out for length" in short.stdout


def test_diagnose_ncu_on_cpu_says_why_not(problems_dir, candidates_dir):
    result = in_process("diagnose", problems_dir / "affine.py", candidates_dir / "affine_ok.py", "--trials", "1",
                        "--ncu", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    findings = single_json_object(result.stdout)["findings"]
    ncu = [f for f in findings if f["category"] == "ncu"]
    assert ncu and "GPU" in ncu[0]["title"]


def test_diagnose_bad_problem_exits_2(problems_dir, candidates_dir):
    result = in_process("diagnose", problems_dir / "missing.py", candidates_dir / "affine_ok.py")
    assert result.returncode == 2 and "error:" in result.stderr


def _reply_cmd(tmp_path, *replies: str) -> str:
    import shlex

    script = TESTS_DIR / "fixtures" / "llm" / "reply_from_files.py"
    words = [sys.executable, str(script), str(tmp_path / "prompts.log"),
             *(str(TESTS_DIR / "fixtures" / "llm" / "replies" / r) for r in replies)]
    return "cmd:" + " ".join(shlex.quote(w) for w in words)


def test_generate_end_to_end_with_a_cmd_provider(problems_dir, tmp_path):
    out = tmp_path / "cand.py"
    result = in_process("generate", problems_dir / "affine.py", "--llm", _reply_cmd(tmp_path, "affine_correct.md"),
                        "--device", "cpu", "--trials", "2", "-o", out, "--record", tmp_path / "rec.jsonl")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("expert: initializer (no parent")
    assert "attempt 1: cmd:" in result.stdout and f"candidate written to {out}" in result.stdout
    assert "ok  correct on 2 trials" in result.stdout and "Diagnosis: ok" in result.stdout
    replay = in_process("generate", problems_dir / "affine.py", "--llm", f"replay:{tmp_path / 'rec.jsonl'}",
                        "--device", "cpu", "--trials", "1", "-o", tmp_path / "again.py", "--json")
    data = single_json_object(replay.stdout)
    assert data["evaluation"]["status"] == "ok" and data["attempts"][0]["reply"]["provider"].startswith("replay:")


def test_generate_without_an_llm_exits_2(problems_dir, tmp_path):
    result = in_process("generate", problems_dir / "affine.py", "--device", "cpu")
    assert result.returncode == 2 and "no LLM given" in result.stderr


def test_generate_with_an_unpriced_model_and_a_dollar_budget_exits_2(problems_dir, tmp_path):
    result = in_process("generate", problems_dir / "affine.py", "--llm", "openai:my-model@http://127.0.0.1:9/v1",
                        "--budget-dollars", "1", "--device", "cpu")
    assert result.returncode == 2 and "error:" in result.stderr and "token" in result.stderr


def test_config_show_json_names_sources(tmp_path, monkeypatch):
    (tmp_path / "kfoundry.toml").write_text('llm = ["cmd:cat"]\ntrials = 3\n')
    monkeypatch.chdir(tmp_path)  # the project's folder, with its kfoundry.toml
    monkeypatch.setenv("KFOUNDRY_TRIALS", "4")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-99999999")
    result = in_process("config", "show", "--json")
    assert result.returncode == 0, result.stderr
    data = single_json_object(result.stdout)
    assert data["llm"]["value"] == "cmd:cat" and data["llm"]["source"].startswith("config file")
    assert data["trials"] == {"value": "4", "source": "environment KFOUNDRY_TRIALS"}
    assert "sk-secret-99999999" not in result.stdout and "masked" in data["keys.openai"]["value"]


def test_optimize_json_gives_the_result_record_and_the_run_directory(problems_dir, candidates_dir, tmp_path):
    run = tmp_path / "run"
    result = kfoundry("optimize", str(problems_dir / "affine.py"), "--device", "cpu", "--trials", "1",
                      "--max-evals", "2", "--islands", "1", "--no-library", "--seed-kernel",
                      str(candidates_dir / "affine_ok.py"), "-o", str(run), "--json")
    record = single_json_object(result.stdout)
    assert result.returncode == 0, result.stderr
    assert record["evaluations"] == 2 and record["best"]["expert"] == "seed" and record["run_dir"] == str(run)
    assert (run / "best.py").is_file() and (run / "report.html").is_file()


def test_optimize_bad_input_exits_2_without_a_run_directory(problems_dir, tmp_path):
    result = in_process("optimize", str(problems_dir / "nope.py"), "-o", str(tmp_path / "run"))
    assert_clean_error(result, "nope.py")
    result = in_process("optimize", str(problems_dir / "affine.py"), "--islands", "0", "-o", str(tmp_path / "run"))
    assert_clean_error(result, "islands")
    result = in_process("optimize", "--resume", str(tmp_path / "missing"))
    assert_clean_error(result, "nothing to resume")
    assert not (tmp_path / "run").exists()


def test_optimize_llm_none_is_the_programmatic_experts_alone(problems_dir, candidates_dir, tmp_path):
    result = in_process("optimize", str(problems_dir / "affine.py"), "--llm", "none", "--device", "cpu",
                        "--trials", "1", "--max-evals", "1", "--no-library", "--seed-kernel", str(candidates_dir / "affine_ok.py"),
                        "-o", str(tmp_path / "run"), "--json")
    assert result.returncode == 0, result.stderr
    assert single_json_object(result.stdout)["llm_used"] is False
    mixed = in_process("optimize", str(problems_dir / "affine.py"), "--llm", "none", "--llm", "cmd:true",
                       "-o", str(tmp_path / "run2"))
    assert_clean_error(mixed, "--llm none")


def test_settings_from_the_environment_and_the_config_file_reach_eval_and_optimize(problems_dir, candidates_dir,
                                                                                    tmp_path, monkeypatch):
    config = tmp_path / "settings.toml"
    config.write_text('trials = 3\npolicy = "permissive"\nislands = 1\nmax_evals = 1\nlibrary = "off"\n')
    monkeypatch.setenv("KFOUNDRY_TRIALS", "2")  # over the file's 3
    result = in_process("eval", problems_dir / "affine.py", candidates_dir / "affine_ok.py", "--config", config,
                        "--json")
    data = single_json_object(result.stdout)
    assert result.returncode == 0 and len(data["correctness"]["seeds"]) == 2, result.stderr
    assert data["settings"]["policy"] == "permissive"
    run = tmp_path / "run"
    result = in_process("optimize", problems_dir / "affine.py", "--device", "cpu", "--seed-kernel",
                        candidates_dir / "affine_ok.py", "--config", config, "-o", run, "--json")
    assert result.returncode == 0, result.stderr
    from kfoundry.runs import RunStore

    with RunStore.open(run) as store:
        kept = store.settings
    assert kept["search"]["islands"] == 1 and kept["search"]["max_evals"] == 1 and kept["search"]["library"] == "off"
    assert kept["eval"]["trials"] == 2 and kept["eval"]["policy"] == "permissive"


def test_problem_cost_names_counted_flops_and_a_counter_that_failed():
    from kfoundry.cli import _flops

    assert _flops(2 * 64 * 64 * 64) == "524288 FLOPs (torch flop counter)"
    assert _flops(0).startswith("FLOPs not counted (pointwise ops")
    assert _flops(None).startswith("FLOPs unknown")


def test_diagnose_json_labels_the_max_abs_error_not_the_tolerance_ratio(problems_dir, candidates_dir):
    result = in_process("diagnose", problems_dir / "affine.py", candidates_dir / "wrong_constant.py", "--trials", "1",
                        "--seed", "5", "--json")
    finding = single_json_object(result.stdout)["findings"][0]
    truth = finding["data"]["truth"]
    # scale * 1.001 is off by about 1e-3 of |y| (<= 5): far below the error in tolerance units
    assert truth["candidate_max_abs"] < 0.01 < 1 < truth["candidate_error_ratio"]
    assert truth["candidate_max_abs"] == pytest.approx(finding["data"]["max_abs"], rel=0.5)
    said = next(e for e in finding["evidence"] if e.startswith("against the float64 truth"))
    assert f"candidate max abs error {truth['candidate_max_abs']:.3g} " in said


def _stored_settings(run: Path) -> dict:
    from kfoundry.runs import RunStore

    with RunStore.open(run) as store:
        return store.settings


def test_optimize_seed_fixes_the_search_seed_and_the_trial_seeds(problems_dir, candidates_dir, tmp_path):
    kernel = candidates_dir / "affine_ok.py"
    run = tmp_path / "run"
    # --seed FILE: for this release, a kernel file that exists, with a warning
    result = in_process("optimize", problems_dir / "affine.py", "--device", "cpu", "--trials", "1", "--max-evals", "1",
                        "--islands", "1", "--no-library", "--seed", kernel, "--seed", "7", "-o", run, "--json")
    assert result.returncode == 0, result.stderr
    assert "--seed-kernel" in result.stderr and "warning" in result.stderr
    assert single_json_object(result.stdout)["best"]["expert"] == "seed"
    kept = _stored_settings(run)
    assert kept["search"]["seed"] == 7 and kept["eval"]["seed"] == 7 and kept["seeds"] == [str(kernel)]


def test_optimize_rng_seed_still_sets_the_search_seed_alone_with_a_warning(problems_dir, candidates_dir, tmp_path):
    run = tmp_path / "run"
    result = in_process("optimize", problems_dir / "affine.py", "--device", "cpu", "--trials", "1", "--max-evals", "1",
                        "--islands", "1", "--no-library", "--seed-kernel", candidates_dir / "affine_ok.py",
                        "--rng-seed", "5", "-o", run, "--json")
    assert result.returncode == 0, result.stderr
    assert "--rng-seed" in result.stderr and "deprecated" in result.stderr
    kept = _stored_settings(run)
    assert kept["search"]["seed"] == 5 and kept["eval"]["seed"] is None


@pytest.mark.parametrize("values, expected", [
    (("nope.py",), "--seed-kernel FILE"),
    (("1", "2"), "give one"),
])
def test_optimize_seed_that_is_neither_a_number_nor_a_file_exits_2(problems_dir, tmp_path, values, expected):
    args = [item for value in values for item in ("--seed", value)]
    result = in_process("optimize", problems_dir / "affine.py", *args, "-o", tmp_path / "run")
    assert_clean_error(result, expected)
    assert not (tmp_path / "run").exists()


def test_the_seed_setting_fixes_the_search_seed_too(tmp_path):
    from kfoundry.config import load_run_config

    run, _ = load_run_config({}, env={"KFOUNDRY_SEED": "11"}, cwd=tmp_path)
    assert run.eval.seed == 11 and run.search.seed == 11
    run, _ = load_run_config({"seed": 11, "rng_seed": 3}, env={}, cwd=tmp_path)
    assert run.eval.seed == 11 and run.search.seed == 3
    run, _ = load_run_config({}, env={}, cwd=tmp_path)
    assert run.eval.seed is None and run.search.seed == 0


# -- the main process never touches the GPU (a GPU machine only) -----------------------------------------------

GPU_EXAMPLE = TESTS_DIR.parent / "examples" / "pointwise_chain"
SAMPLE_EVERY_S = 0.2


def _family(root: int) -> set[int]:
    """The processes descended from `root` now (its workers, the fork servers' children, what they started)."""
    parents = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    family: set[int] = set()
    found = {root}
    while found:
        family |= found
        found = {pid for pid, parent in parents.items() if parent in found and pid not in family}
    return family - {root}


class GpuWatch:
    """What NVML listed while a command ran: the main process's holdings and its workers'."""

    def __init__(self) -> None:
        self.samples = 0
        self.main: list[tuple[int, str]] = []  # (bytes, a line saying when, where and how much)
        self.workers: dict[int, str] = {}  # pid -> the last line seen of it

    def sample(self, main_pid: int, seconds: float) -> None:
        from kfoundry.gpu_usage import gpu_usage

        usage = gpu_usage()
        family = _family(main_pid)
        self.samples += 1
        for gpu, holder in usage.processes():
            line = f"at {seconds:.1f} s, GPU {gpu.index}: {holder.describe()}"
            if holder.pid == main_pid:
                self.main.append((holder.used_bytes or 0, line))
            elif holder.pid in family:
                self.workers[holder.pid] = line

    def main_report(self) -> str:
        most = max(self.main)[1]
        return f"in {len(self.main)} of {self.samples} samples; the most {most}; the first {self.main[0][1]}"


def _watch_gpu(args: list, cwd: Path, timeout_s: float) -> tuple[int, int, GpuWatch, str]:
    """Run `python -m kfoundry ARGS`, sampling NVML every SAMPLE_EVERY_S: (exit code, pid, watch, output)."""
    log = cwd / "command.log"
    watch = GpuWatch()
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "kfoundry", *map(str, args)], stdout=out,
                                   stderr=subprocess.STDOUT, cwd=cwd, env=dict(os.environ, COLUMNS="200"))
        started = time.monotonic()
        try:
            while process.poll() is None and time.monotonic() - started < timeout_s:
                watch.sample(process.pid, time.monotonic() - started)
                time.sleep(SAMPLE_EVERY_S)
        finally:
            if process.poll() is None:
                process.kill()  # past timeout_s: its workers end with it (their lifelines)
            process.wait()
    return process.returncode, process.pid, watch, log.read_text(errors="replace")


def _gpu_command(command: str, tmp_path: Path) -> list:
    if command == "optimize":  # programmatic experts; the experience library (BM25 retrieval) on, in tmp_path
        return ["optimize", GPU_EXAMPLE / "problem.py", "--llm", "none", "--max-evals", "3", "--trials", "2",
                "--library", tmp_path / "library.sqlite", "-o", tmp_path / "run", "--quiet"]
    suite, solutions = tmp_path / "suite", tmp_path / "solutions"
    suite.mkdir()
    solutions.mkdir()
    shutil.copy(GPU_EXAMPLE / "problem.py", suite / "1_pointwise_chain.py")
    shutil.copy(GPU_EXAMPLE / "kernel.py", solutions / "1_pointwise_chain.py")
    return ["bench", suite, "--method", "solutions", solutions, "--trials", "2", "--timing-trials", "20",
            "-o", tmp_path / "bench"]


@pytest.mark.gpu
@pytest.mark.timeout(900)
@pytest.mark.parametrize("command", ["optimize", "bench"])
def test_the_main_process_never_holds_gpu_memory(command, tmp_path):
    """The main process makes no CUDA context and starts no JAX backend (kfoundry.library.text_index): NVML never
    lists it among the GPU's processes, while it lists the workers it started."""
    from kfoundry.gpu_usage import gpu_usage

    usage = gpu_usage()
    if not usage.available:
        pytest.skip(f"NVML cannot be read here: {usage.reason}")
    code, pid, watch, output = _watch_gpu(_gpu_command(command, tmp_path), tmp_path, timeout_s=600)
    assert not watch.main, f"kfoundry {command}'s main process (pid {pid}) held GPU memory {watch.main_report()}"
    assert code == 0, f"kfoundry {command} exited {code}:\n{output[-4000:]}"
    assert watch.workers, (f"in {watch.samples} samples NVML listed no process of kfoundry {command} (pid {pid}) "
                           "holding GPU memory, so the check saw nothing: are NVML's pids this container's?")


# -- environment faults ---------------------------------------------------------------------------------

needs_landlock = pytest.mark.skipif(not __import__("kfoundry.sandbox.landlock", fromlist=["x"]).abi_version(),
                                    reason="the kernel enforces no Landlock: nothing is denied")


def _unreadable_dependency_env(tmp_path: Path) -> dict:
    """The report's machine: a dependency on PYTHONPATH that the candidates' sandbox cannot read (a link out of
    every folder it reads); workers import torch themselves, as on a GPU."""
    from tests.helpers import linked_unreadable_dependency

    return {"PYTHONPATH": str(linked_unreadable_dependency(tmp_path)), "KFOUNDRY_FORK_SERVER": "0"}


def _kfoundry_with(env: dict, *args, timeout: float = 300) -> subprocess.CompletedProcess:
    full = dict(os.environ, COLUMNS="200", **env)
    return subprocess.run([str(KFOUNDRY), *map(str, args)], capture_output=True, text=True, timeout=timeout, env=full)


@needs_landlock
def test_eval_stops_with_one_message_and_exit_2_when_a_worker_cannot_import_a_dependency(
        problems_dir, candidates_dir, tmp_path, monkeypatch):
    env = _unreadable_dependency_env(tmp_path)
    args = ("eval", problems_dir / "affine.py", candidates_dir / "affine_ok.py", "--device", "cpu", "--trials", "1")
    result = _kfoundry_with(env, *args)  # the console script for real: its stderr and exit code
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""  # no verdict, no diagnosis
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: environment fault: a candidate's worker process cannot "
                                                     "read")
    assert "fix: make " in result.stderr and "Traceback" not in result.stderr
    for name, value in env.items():  # the same machine for the same command with --json, in this process
        monkeypatch.setenv(name, value)
    as_json = in_process(*args, "--json")
    assert as_json.returncode == 2, as_json.stderr
    record = single_json_object(as_json.stdout)
    assert record["status"] == "environment_error" and "PermissionError: [Errno 13]" in record["cause"]
    assert record["fix"].startswith("make ")


@needs_landlock
def test_optimize_stops_at_once_without_spending_an_evaluation(problems_dir, candidates_dir, tmp_path, monkeypatch):
    run = tmp_path / "run"
    for name, value in _unreadable_dependency_env(tmp_path).items():  # workers are processes of their own all the same
        monkeypatch.setenv(name, value)
    result = in_process("optimize", problems_dir / "affine.py", "--device", "cpu", "--trials", "1", "--max-evals", "6",
                        "--islands", "1", "--no-library", "--seed-kernel", candidates_dir / "affine_ok.py", "-o", run,
                        "--json")
    assert result.returncode == 2, result.stderr
    record = single_json_object(result.stdout)
    assert record["status"] == "environment_error" and "cannot read" in record["cause"]
    assert f"continue with kfoundry optimize --resume {run}" in " ".join(result.stderr.split())
    from kfoundry.runs import RunStore

    with RunStore.open(run, resume=False) as store:
        assert store.finished_evaluations() == {} and not (run / "result.json").exists()
