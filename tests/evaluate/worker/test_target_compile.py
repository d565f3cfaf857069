"""kfoundry.evaluate.worker.target_compile: a CPU verdict's kernels compiled for the target GPU as they were launched
(Triton and its bundled ptxas, no GPU): registers, spills and shared memory, the launch tracker's records in, and
a row that says why wherever a kernel cannot be compiled."""

import importlib.util
import json

import pytest
import torch
import triton

from kfoundry.diagnose.engine import diagnose
from kfoundry.diagnose.render import render_markdown
from kfoundry.evaluate import EvalOptions, Evaluator
from kfoundry.evaluate.worker.target_compile import derive
from kfoundry.guard.dynamic import LaunchTracker
from kfoundry.sandbox.environment import IMPORT_PATH_ENV

KERNELS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def scaled(a, s):
    return a * s


@triton.jit
def row_product_kernel(x_ptr, y_ptr, n, s, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    cols = tl.arange(0, BLOCK)
    a = tl.load(x_ptr + rows[:, None] * BLOCK + cols[None, :], mask=rows[:, None] < n, other=0.0)
    b = tl.dot(scaled(a, s), a)
    tl.store(y_ptr + rows[:, None] * BLOCK + cols[None, :], tl.max(b, axis=1)[:, None] + b, mask=rows[:, None] < n)


@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=2, num_stages=1)], key=["n"])
@triton.jit
def tuned_copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
'''


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """The module's kernels launched once through the interpreter under the launch tracker."""
    path = tmp_path_factory.mktemp("target") / "kernels.py"
    path.write_text(KERNELS)
    spec = importlib.util.spec_from_file_location("target_compile_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tracker = LaunchTracker().install()
    try:
        x = torch.randn(64, 32)
        module.row_product_kernel[(2,)](x, torch.empty_like(x), 64, 0.5, BLOCK=32, num_warps=4, num_stages=2)
        flat = torch.randn(100)
        module.tuned_copy_kernel[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](flat, torch.empty_like(flat), 100)
    finally:
        tracker.uninstall()
    return path, dict(tracker.interpreted)


def test_the_tracker_records_each_interpreted_launch_as_the_compile_needs_it(launched):
    _, launches = launched
    product = launches["row_product_kernel"]
    assert product["args"][:2] == [{"tensor": "float32", "aligned": True}] * 2
    assert product["args"][2:] == [{"int": 64}, {"float": 0.5}]
    assert product["kwargs"] == {"BLOCK": {"int": 32}, "num_warps": {"int": 4}, "num_stages": {"int": 2}}
    assert launches["tuned_copy_kernel"]["kwargs"]["BLOCK"] == {"int": 64}  # the autotuner's config, as launched


@pytest.fixture(scope="module")
def derived(launched):
    """One compile for sm_90 (a child process that imports torch and Triton): the launched kernels, beside a
    launch of a kernel the module lacks and one whose arguments cannot be stood in for."""
    path, launches = launched
    asked = {**launches, "gone_kernel": launches["row_product_kernel"], "odd_kernel": None}
    return {row["name"]: row for row in derive(path, asked, "9.0")}


def test_each_kernel_is_compiled_for_the_target_as_launched(launched, derived):
    path, launches = launched
    product, copy = derived["row_product_kernel"], derived["tuned_copy_kernel"]
    assert "error" not in product and product["derived_for"] == "sm_90"
    assert (product["num_warps"], product["num_stages"]) == (4, 2)
    assert product["shared_bytes"] >= 32 * 32 * 4  # the dot's operand tile is staged in shared memory
    assert 0 < product["n_regs"] <= 255 and product["n_spills"] == 0
    assert (copy["num_warps"], copy["num_stages"]) == (2, 1) and copy["n_regs"] > 0
    older = {row["name"]: row for row in derive(path, {"row_product_kernel": launches["row_product_kernel"]}, "8.0")}
    assert older["row_product_kernel"]["derived_for"] == "sm_80"


def test_what_cannot_be_compiled_gets_a_row_that_says_why(launched, derived, tmp_path):
    path, launches = launched
    assert "no kernel of that name" in derived["gone_kernel"]["error"]
    assert "cannot stand in for" in derived["odd_kernel"]["error"]
    assert "n_regs" not in derived["gone_kernel"] and "n_regs" not in derived["odd_kernel"]
    broken = tmp_path / "broken.py"
    broken.write_text("raise SystemExit('no import')\n")
    [row] = derive(broken, {"row_product_kernel": launches["row_product_kernel"]}, "9.0")
    assert row["error"] and "n_regs" not in row
    assert derive(path, {}, "9.0") == []


def test_a_cpu_verdict_carries_the_targets_figures_and_the_diagnosis_shows_them(problems_dir, candidates_dir):
    options = EvalOptions(device="cpu", trials=1, timeout_s=120, static_target="9.0")
    with Evaluator(problems_dir / "affine.py", options) as evaluator:
        evaluation = evaluator.evaluate(candidates_dir / "affine_ok.py")
    assert evaluation.status == "ok", evaluation.message
    [row] = evaluation.profile["triton"]
    assert row["name"] == "_affine_kernel" and row["derived_for"] == "sm_90" and row["n_regs"] > 0
    text = render_markdown(diagnose(evaluation, (candidates_dir / "affine_ok.py").read_text()))
    assert "_affine_kernel" in text and "registers/thread" in text and "sm_90" in text


def test_without_a_target_a_cpu_verdict_compiles_nothing(affine_eval):
    assert "triton" not in affine_eval("affine_ok.py").profile


def test_the_child_imports_the_users_own_modules_as_the_worker_does(tmp_path, monkeypatch, launched):
    _, launches = launched
    own = tmp_path / "users_code"
    own.mkdir()
    (own / "users_kernels.py").write_text(KERNELS)
    candidate = tmp_path / "candidate" / "model_new.py"
    candidate.parent.mkdir()
    candidate.write_text("from users_kernels import row_product_kernel\n")
    monkeypatch.setenv(IMPORT_PATH_ENV, json.dumps([str(own)]))
    [row] = derive(candidate, {"row_product_kernel": launches["row_product_kernel"]}, "9.0")
    assert "error" not in row and row["n_regs"] > 0
