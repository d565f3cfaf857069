"""The prompt's lines on the shapes under test and on what a kernel may assume of its inputs."""

from __future__ import annotations

from kfoundry.experts.context import PromptContext


def shape_lines(context: PromptContext) -> list[str]:
    """Where correctness is checked and speed measured, and whether those are the problem file's sizes."""
    facts = context.facts
    if facts is None:
        return ["the shapes under test follow from the problem's constants and `get_inputs()`"]
    lines = []
    if facts.overrides:
        changed = ", ".join(f"{name} = {value!r}" + (f" (the file says {facts.file_values[name]})"
                                                     if name in facts.file_values else "")
                            for name, value in facts.overrides.items())
        lines.append(f"this run overrides the problem's constants: {changed}; the shapes below are the ones "
                     "tested, and they differ from what the file's constants give")
    lines.append(f"correctness is checked at these shapes, on {context.trials} trials, each with a new draw of "
                 "`get_inputs()` from another seed:")
    lines += [f"  {fact.line()}" for fact in facts.inputs]
    for index, output in enumerate(facts.outputs):
        lines.append(f"  output {index}: {output.get('dtype')} {list(output.get('shape') or [])}")
    if facts.why_not_drawn:
        lines.append(f"  ({facts.why_not_drawn})")
    elif facts.draws:
        lines.append(f"  (ranges and properties: what held in each of {facts.draws} draws made to describe them)")
    if context.timed:
        lines.append("speed is measured at the same shapes, on the GPU described below")
    else:
        lines.append("speed is not measured in this run: nothing is timed, so no shape here is a speed target")
    if facts.overrides:
        lines.append("the kernel must be correct at the file's own sizes as well as these: derive every size from "
                     "the tensors, and give no shape a special path that these tests would not exercise")
    return lines


def assumption_lines(context: PromptContext) -> list[str]:
    """What the problem lets a kernel rely on, and what it must not."""
    return [
        "may rely on: the dtypes, ranks and contiguity listed above, and on a property listed for an input "
        "where `get_inputs()` makes it so by construction (an input built with `torch.triu` is upper-triangular; "
        "one drawn with `torch.rand` lies in [0, 1))",
        "must not rely on: the values of any one draw (every trial draws new ones), a property that only "
        "happened to hold in the draws described, sizes being multiples of a block unless the constants make "
        "them so, or anything kept from an earlier call",
    ]
