"""kfoundry.experts: every expert's prompt carries every part the brief asks for, from its template."""

import jinja2
import pytest

from kfoundry.errors import UsageError
from kfoundry.experts import EXPERTS, ParentInfo, render, render_system
from kfoundry.experts.replies import find_fences
from kfoundry.experts.templates import environment
from kfoundry.guard import RULES, check_source
from kfoundry.guard.findings import PERMISSIVE_WARNINGS
from kfoundry.types import DeviceFacts
from tests.experts.helpers import AFFINE, context, failing_parent, load_module, working_parent


def _prompt(name, **changes):
    parents = [working_parent(), failing_parent()] if name == "crossover" else [failing_parent()]
    if name == "initializer":
        parents = []
    system, user = render(name, context(parents=parents, **changes))
    return system, user


@pytest.mark.parametrize("name", sorted(EXPERTS))
def test_each_prompt_carries_every_part(name):
    system, user = _prompt(name)
    text = system + user
    assert AFFINE.read_text().strip() in user  # the problem, verbatim
    assert "## The problem: affine" in user
    for marker in ("NVIDIA H200", "132", "4321.5 GB/s", "fp32 51.7 TFLOP/s", "tf32 378.2 TFLOP/s", "60.0 MiB",
                   "227 KiB", "228 KiB"):
        assert marker in user, marker
    for rule in ("torch-compute", "try-except", "streams", "monkey-patch", "output-caching", "environment"):
        assert f"`{rule}`" in system
    assert RULES["try-except"][1] in system  # what to do instead, in the guard's own words
    assert "class ModelNew(nn.Module)" in text and "get_init_inputs()" in text  # the contract
    assert "atol = rtol = 0.0001" in user and "precision: fp32" in user
    assert "Floor-divided grids drop the tail" in user and "(from run 7 / row_sum)" in user
    assert "Always size grids with triton.cdiv." in user
    assert "offs = pid * BLOCK + tl.arange(0, BLOCK)" in user  # an experience item's code
    assert "your last reply had no code block" in user
    expert = EXPERTS[name]
    if expert.edits_allowed and expert.needs_parent:  # both reply formats, and only then
        assert "<<<<<<< SEARCH" in system and "```python" in system and "SEARCH/REPLACE blocks against" in user
    else:
        assert "SEARCH" not in system + user and "```python" in system
    if name == "initializer":
        assert "## Parent" not in user
    else:
        parent = failing_parent()
        assert parent.source.strip() in user  # verbatim: SEARCH blocks are copied from it
        assert parent.diagnosis_markdown in user
        assert "Verdict: `wrong_output`: output 0 differs from the reference: max abs error 2.431" in user
        assert "max abs error: 2.43" in user and "runtime: not measured" in user


def test_each_expert_renders_its_own_template():
    titles = {}
    for name, expert in EXPERTS.items():
        assert expert.template in environment().list_templates()
        titles[name] = _prompt(name)[1].splitlines()[0]
        assert titles[name].startswith("# Task:")
    assert len(set(titles.values())) == len(EXPERTS)  # each its own task


def test_every_guard_rule_is_in_the_strict_rules_and_permissive_warns_about_pytorch_compute():
    strict = render_system("triton", "strict")
    for rule, (catches, instead) in RULES.items():
        assert f"- `{rule}`: {catches}. Instead: {instead}." in strict
    permissive = render_system("triton", "permissive")
    for rule in PERMISSIVE_WARNINGS:
        assert f"- `{rule}`: {RULES[rule][0]}. Better:" in permissive
        assert f"- `{rule}`: {RULES[rule][0]}. Instead:" not in permissive
    assert "at least one of your own kernels must run" in permissive


def test_the_cuda_backend_carries_load_inline_rules():
    system, user = _prompt("repair", backend="cuda")
    for marker in ("load_inline", "cuda_sources", "cpp_sources", "functions", "getCurrentCUDAStream",
                   "C10_CUDA_KERNEL_LAUNCH_CHECK", "TORCH_CHECK", "cuBLAS"):
        assert marker in system, marker
    assert "@triton.jit" not in system
    assert "CUDA C++" in system and "no TF32 tensor-core math" in user


def test_the_triton_backend_carries_its_rules():
    system = render_system("triton")
    for marker in ("@triton.jit", "tl.constexpr", "triton.cdiv", "mask=offs < n", 'input_precision="ieee"',
                   "TF32", "num_stages", "next_power_of_2"):
        assert marker in system, marker
    assert "load_inline" not in system


def test_the_triton_example_is_correct_and_passes_the_guard(tmp_path):
    import torch

    (example,) = [f.text for f in find_fences(render_system("triton")) if "class ModelNew" in f.text]
    assert check_source(example) == []
    module = load_module(example, tmp_path, "triton_example")
    torch.manual_seed(0)
    new = module.ModelNew(70)
    x = torch.randn(37, 70)
    with torch.no_grad():
        assert torch.allclose(new(x), torch.relu(x + new.bias), atol=1e-6)


def test_the_cuda_example_passes_the_guard():
    (example,) = [f.text for f in find_fences(render_system("cuda")) if "class ModelNew" in f.text]
    assert check_source(example) == []
    compile(example, "<cuda example>", "exec")


def test_cpu_or_missing_device_says_target_unknown_and_speed_not_measured():
    for device in (None, DeviceFacts(kind="cpu", name="AMD EPYC (16 cores)")):
        _, user = _prompt("memory", device=device)
        assert "target GPU: unknown" in user and "speed is not measured" in user
    _, user = _prompt("memory", device=DeviceFacts(kind="cpu", name="AMD EPYC (16 cores)"))
    assert "AMD EPYC" in user


def test_missing_device_figures_say_not_measured():
    facts = DeviceFacts(kind="cuda", name="NVIDIA Mystery", sm_count=None, peak_bandwidth_gbs=None)
    _, user = _prompt("compute", device=facts)
    assert "SM count: not measured" in user and "memory bandwidth (peak): not measured" in user
    assert "compute (peak): not measured" in user and "L2 cache: not measured" in user


def test_empty_experience_and_no_feedback():
    _, user = _prompt("fusion", experience=[], feedback=[])
    assert "## Retrieved experience\n\nnone yet" in user
    assert "could not be used" not in user


def test_parent_figures_and_mutations_show_one_parent_crossover_all():
    good, bad = working_parent(), failing_parent()
    _, user = render("memory", context(parents=[good, bad]))
    assert "runtime: 0.01234 ms" in user and "speedup vs PyTorch eager: 1.87x" in user
    assert "speedup vs torch.compile: 0.93x" in user and "launch-bound" in user
    assert bad.source.strip() not in user and "The parent below is correct where it was checked" in user
    _, user = render("crossover", context(parents=[good, bad]))
    assert good.source.strip() in user and bad.source.strip() in user
    assert "## Parent A" in user and "## Parent B" in user and "Reply with one complete candidate file" in user


def test_mutation_of_a_failing_parent_says_so():
    _, user = render("compute", context())
    assert "does not pass yet (verdict `wrong_output`)" in user


def test_repair_guidance_follows_the_verdict():
    _, wrong = render("repair", context())
    assert "floor-divided grid" in wrong
    cheat = ParentInfo(source="class ModelNew: pass\n", status="cheating", message="[torch-compute] line 3")
    _, user = render("repair", context(parents=[cheat]))
    assert "The guard rejected the parent" in user and "[torch-compute] line 3" in user


def test_precision_and_tolerance():
    _, user = render("compute", context(precision="fp16"))
    assert "precision: fp16" in user and "atol = rtol = 0.01" in user and "float16" in user
    assert "tensor cores on fp16 inputs are fine" in user
    _, user = render("compute", context(tolerance=0.02))
    assert "atol = rtol = 0.02" in user and "loose enough for TF32" in user
    _, user = render("compute", context())
    assert 'input_precision="ieee"' in user


def test_sources_with_backticks_get_a_longer_fence():
    parent = ParentInfo(source='doc = """```python\nx\n```"""\nclass ModelNew: pass\n', status="ok")
    _, user = render("fusion", context(parents=[parent]))
    assert "````python\ndoc = " in user


def test_bad_requests_are_usage_errors():
    with pytest.raises(UsageError, match="unknown expert 'tuner'"):
        render("tuner", context())
    with pytest.raises(UsageError, match="crossover expert needs at least 2 parent"):
        render("crossover", context())
    with pytest.raises(UsageError, match="repair expert needs at least 1 parent"):
        render("repair", context(parents=[]))
    with pytest.raises(UsageError, match="unknown backend"):
        render("repair", context(backend="metal"))
    with pytest.raises(UsageError, match="unknown policy"):
        render("repair", context(policy="lenient"))
    with pytest.raises(UsageError, match="unknown precision"):
        render("repair", context(precision="fp8"))


def test_templates_are_strict_about_undefined_names():
    env = environment()
    assert env.undefined is jinja2.StrictUndefined
    with pytest.raises(jinja2.UndefinedError):
        env.get_template("repair.j2").render()
    for name in env.list_templates():
        assert name.endswith(".j2")
        env.get_template(name)  # parses


def test_an_untimed_parent_is_said_to_be_untimed_and_no_figure_is_promised():
    import dataclasses

    timed = working_parent()
    untimed = dataclasses.replace(timed, runtime_ms=None, speedup_eager=None, speedup_compile=None,
                                  diagnosis_markdown="### Diagnosis: ok\nspeed not measured on CPU: nothing timed")
    _, user = render("memory", context(parents=[untimed]))
    assert "Its speed was not measured" in user and "achieved bandwidth" not in user
    assert "--device" not in user and "time it on a GPU" not in user  # no advice meant for the operator
    _, user = render("memory", context(parents=[timed]))
    assert "Its speed was not measured" not in user and "achieved bandwidth against the device's peak" in user
