"""kfoundry.experts.context: what prompts are rendered from, built from an evaluation."""

from kfoundry.diagnose.render import render_markdown
from kfoundry.experts import ParentInfo, PromptContext
from kfoundry.types import CorrectnessReport, Evaluation, TimingReport
from tests.experts.helpers import tail_diagnosis


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
                            precision={"checked": "cpu", "dots": {"emulated": {"tf32x3": 3}, "exact": {}}})
    checked = ParentInfo.from_evaluation("src", evaluation).checked
    assert checked == ("judged at this run's sizes (batch_size = 2, dim = 64), not at the problem file's own sizes; "
                       "precision emulated on the CPU: tl.dot emulated as on a GPU (TF32x3 x3)")
    evaluation = Evaluation(status="ok", message="correct", precision={"checked": "gpu"},
                            other_sizes=SizeCheck(other={"dim": 47}, holds=True, status="ok"))
    assert ParentInfo.from_evaluation("src", evaluation).checked == (
        "judged at the problem file's own sizes; holds at other sizes: yes (dim=47); precision checked on the GPU")
