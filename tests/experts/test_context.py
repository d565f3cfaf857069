"""kfoundry.experts.context: what prompts are rendered from, built from an evaluation."""

from kfoundry.diagnose.render import render_markdown
from kfoundry.experts import ParentInfo, PromptContext
from kfoundry.experts.context import checked_text
from kfoundry.types import CorrectnessReport, Evaluation, TimingReport
from tests.experts.helpers import H200, tail_diagnosis


def test_parent_from_an_evaluation_takes_its_figures_and_diagnosis():
    evaluation = Evaluation(
        status="wrong_output", message="output 0 differs", candidate="/tmp/c.py",
        correctness=CorrectnessReport(max_abs_error=2.5, max_rel_error=0.7, mismatch_fraction=0.232),
        timing=TimingReport(runtime_ms=0.5, speedup_eager=1.25, speedup_compile=0.8), diagnosis=tail_diagnosis())
    parent = ParentInfo.from_evaluation("class ModelNew: pass\n", evaluation)
    assert parent.source == "class ModelNew: pass\n" and parent.path == "/tmp/c.py"
    assert (parent.status, parent.message) == ("wrong_output", "output 0 differs")
    assert (parent.runtime_ms, parent.speedup_eager, parent.speedup_compile) == (0.5, 1.25, 0.8)
    assert (parent.max_abs_error, parent.max_rel_error, parent.mismatch_fraction) == (2.5, 0.7, 0.232)
    assert parent.diagnosis_markdown == render_markdown(tail_diagnosis())
    assert ParentInfo.from_evaluation("x = 1\n", evaluation, path="parent.py").path == "parent.py"


def test_parent_without_a_diagnosis_or_timing():
    parent = ParentInfo.from_evaluation("x = 1\n", Evaluation(status="ok", message="correct"))
    assert parent.diagnosis_markdown == "" and parent.runtime_ms is None and parent.max_abs_error is None


def test_context_defaults_and_tolerance():
    ctx = PromptContext(problem_source="src", problem_name="p")
    assert (ctx.backend, ctx.parents, ctx.device, ctx.policy) == ("triton", [], None, "strict")
    assert (ctx.experience, ctx.feedback, ctx.precision) == ([], [], "fp32")
    assert ctx.effective_tolerance == 1e-4
    assert PromptContext("s", "p", precision="bf16").effective_tolerance == 1e-2
    assert PromptContext("s", "p", precision="fp16", tolerance=5e-3).effective_tolerance == 5e-3


def test_a_parent_says_at_which_sizes_and_how_its_verdict_was_checked():
    from kfoundry.types import SizeCheck

    evaluation = Evaluation(status="ok", message="correct", settings={"set": {"batch_size": 2, "dim": 64}},
                            device="cpu",
                            precision={"checked": "cpu", "dots": {"emulated": {"tf32x3": 3}, "exact": {}}})
    checked = ParentInfo.from_evaluation("src", evaluation).checked
    assert checked == ("verified on the CPU at this run's sizes (batch_size = 2, dim = 64), not at the problem file's "
                       "own sizes; " + CPU_DOTS + "; its fp32 tl.dot ran at tf32x3, with that rounding applied; "
                       "speed not measured")
    evaluation = Evaluation(status="ok", message="correct", device="cuda:0", precision={"checked": "gpu"},
                            device_facts=H200, timing=TimingReport(runtime_ms=0.5, device="NVIDIA H200"),
                            other_sizes=SizeCheck(other={"dim": 47}, holds=True, status="ok"))
    assert ParentInfo.from_evaluation("src", evaluation).checked == (
        "verified on NVIDIA H200 at the problem file's own sizes; holds at other sizes: yes (dim=47); "
        "tl.dot runs on that GPU itself, TF32 included: nothing emulated; speed measured there")


CPU_DOTS = ("on the CPU tl.dot's input_precision is emulated as a GPU's tensor cores compute it (TF32 rounding "
            "applied to fp32 operands at tf32 and tf32x3)")


def test_the_checked_line_says_what_the_cpu_emulated_of_the_parents_dots():
    from kfoundry.evaluate.parent.precision_check import precision_record

    def checked(status="ok", **record):
        evaluation = Evaluation(status=status, message="", device="cpu", precision=precision_record("cpu", **record))
        return ParentInfo.from_evaluation("src", evaluation).checked

    assert checked(dots={"emulated": {"tf32": 4, "tf32x3": 2}, "exact": {"ieee": 1}}, compute_ops=[]) == (
        "verified on the CPU at the problem file's own sizes; " + CPU_DOTS
        + "; its fp32 tl.dot ran at tf32 and tf32x3, with that rounding applied; speed not measured")
    assert checked(dots={"emulated": {}, "exact": {"ieee": 2}}, compute_ops=[]) == (
        "verified on the CPU at the problem file's own sizes; " + CPU_DOTS
        + "; its fp32 tl.dot ran at ieee only, so there was no TF32 rounding to apply; speed not measured")
    assert checked(dots={"emulated": {}, "exact": {}}, compute_ops=None) == (
        "verified on the CPU at the problem file's own sizes; " + CPU_DOTS
        + "; it ran no fp32 tl.dot, so there was no TF32 rounding to apply; speed not measured")
    # judged wrong before the worker finished: its dots were not counted; a library matmul ran in IEEE fp32
    assert checked("wrong_output", dots=None, compute_ops=["mm", "relu"]) == (
        "judged on the CPU at the problem file's own sizes; " + CPU_DOTS + "; PyTorch's mm called by the "
        "candidate ran in IEEE fp32 here (TF32 on a GPU where PyTorch allows it); speed not measured")


def test_the_checked_line_names_the_gpu_where_recorded_and_says_nothing_it_does_not_know():
    from kfoundry.types import DeviceFacts

    evaluation = Evaluation(status="wrong_output", message="", device="cuda", precision={"checked": "gpu"},
                            device_facts=DeviceFacts(kind="cuda", name="NVIDIA H100 80GB HBM3"))
    assert checked_text(evaluation) == ("judged on NVIDIA H100 80GB HBM3 at the problem file's own sizes; tl.dot runs "
                                        "on that GPU itself, TF32 included: nothing emulated; speed not measured")
    unnamed = Evaluation(status="ok", message="", device="cuda:1", precision={"checked": "gpu"},
                         timing=TimingReport(runtime_ms=1.0))
    assert checked_text(unnamed).startswith("verified on a GPU at the problem file's own sizes; ")
    assert checked_text(unnamed).endswith("; speed measured there")
    # an evaluation that records neither its device nor its precision (an older record)
    assert checked_text(Evaluation(status="ok", message="")) == "verified at the problem file's own sizes"


def test_the_roofline_line_takes_the_baselines_measured_by_the_time_a_prompt_is_written():
    from kfoundry.experts.llm_experts import render
    from kfoundry.experts.roofline_text import RooflineEstimate

    estimate = RooflineEstimate(flops=2 * 10**9, moved=4 * 10**8, memory_ms=0.083, compute_ms=0.04, roof="3xTF32",
                                device="NVIDIA H200")
    measured: dict[str, float] = {}
    context = PromptContext(problem_source="x = 1", problem_name="p", roofline=estimate, baseline_ms=measured.get)
    _, before = render("initializer", context)
    assert "eager and torch.compile not timed at those sizes here" in before
    measured["eager"] = 1.25  # the baseline process reports eager first, torch.compile after its compile
    _, eager_only = render("initializer", context)
    assert "eager 1.25 ms" in eager_only and "torch.compile" not in eager_only.split("Roofline estimate:")[1].split("\n")[0]
    measured["compile"] = 0.9
    line = [ln for ln in render("initializer", context)[1].splitlines() if ln.startswith("Roofline estimate:")][0]
    assert "eager 1.25 ms, torch.compile 0.9 ms" in line
    assert PromptContext(problem_source="", problem_name="p", roofline=estimate).roofline_now() is estimate


def test_an_untimed_parent_compiled_for_the_target_is_told_so_and_the_compute_task_reads_its_diagnosis():
    from kfoundry.experts.llm_experts import render

    evaluation = Evaluation(candidate="c.py", status="ok", message="", device="cpu", correctness=CorrectnessReport(),
                            timing=TimingReport(), profile={"triton": [
                                {"name": "k", "num_warps": 4, "n_regs": 40, "derived_for": "sm_90"}]})
    parent = ParentInfo.from_evaluation("x = 1", evaluation)
    assert parent.derived_for == "sm_90"
    _, user = render("compute", PromptContext(problem_source="x = 1", problem_name="p", parents=[parent]))
    assert "as compiled for the target (sm_90) on this run's CPU, not run" in user
    plain = ParentInfo.from_evaluation("x = 1", Evaluation(candidate="c.py", status="ok", message="", device="cpu",
                                                           correctness=CorrectnessReport(), timing=TimingReport()))
    _, user = render("compute", PromptContext(problem_source="x = 1", problem_name="p", parents=[plain]))
    assert "register use and shared memory are not measured in this run" in user
