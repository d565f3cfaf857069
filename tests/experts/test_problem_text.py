"""kfoundry.experts.problem_text: the prompt says where correctness is checked and speed measured."""

from kfoundry.experts.context import PromptContext
from kfoundry.experts.problem_text import assumption_lines, shape_lines
from kfoundry.input_facts import InputFact, ProblemFacts


def _context(**kwargs):
    facts = ProblemFacts(inputs=[InputFact(0, shape=[8, 1000], dtype="float32", contiguous=True, low=-3.1, high=2.9,
                                           properties=["all finite"])],
                         overrides={"batch_size": 8}, file_values={"batch_size": "32768"}, draws=2,
                         outputs=[{"shape": [8, 1000], "dtype": "float32"}])
    return PromptContext(problem_source="", problem_name="p", facts=facts, **kwargs)


def test_overridden_sizes_are_named_with_the_files_own_and_untimed_runs_say_so():
    lines = shape_lines(_context(trials=5))
    text = "\n".join(lines)
    assert "batch_size = 8 (the file says 32768)" in text and "differ from what the file's constants give" in text
    assert "on 5 trials" in text and "  input 0: float32 [8, 1000], contiguous, values seen in [-3.1, 2.9], all finite" in lines
    assert "  output 0: float32 [8, 1000]" in lines
    assert "speed is not measured in this run" in text and "correct at the file's own sizes" in text


def test_a_timed_run_measures_speed_at_the_shapes_under_test():
    context = _context(timed=True)
    context.facts.overrides, context.facts.file_values = {}, {}
    text = "\n".join(shape_lines(context))
    assert "speed is measured at the same shapes" in text and "overrides" not in text
    assert any("torch.triu" in line for line in assumption_lines(context))


def test_without_facts_the_files_constants_are_the_shapes():
    assert shape_lines(PromptContext(problem_source="", problem_name="p")) == [
        "the shapes under test follow from the problem's constants and `get_inputs()`"]
