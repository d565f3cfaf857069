"""The LLM experts' prompts: each expert is a concern, a prompt template and its traits. `render` gives
the (system, user) prompts for one step; `kfoundry.experts.llm_step` sends them to a provider and
parses the reply (kfoundry.experts.llm_expert is the expert that does this in a search)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kfoundry.errors import UsageError
from kfoundry.experts.base import FIXES, Traits
from kfoundry.experts.context import ParentInfo, PromptContext
from kfoundry.experts.device_text import device_lines
from kfoundry.experts.parent_summary import summary_lines
from kfoundry.experts.problem_text import assumption_lines, shape_lines
from kfoundry.experts.prompt_budget import (DEFAULT_RETRIEVE_TOKENS, fit_items, heading, is_note,
                                            left_out_note, tokenizer)
from kfoundry.experts.rules import allowed, rejected_rules, warned_rules
from kfoundry.experts.templates import number, render_template
from kfoundry.guard.findings import POLICIES
from kfoundry.problem import PRECISIONS

BACKENDS = {"triton": "Triton", "cuda": "CUDA C++ (torch.utils.cpp_extension.load_inline)"}


@dataclass(frozen=True)
class ExpertPrompt:
    name: str
    concern: str
    template: str
    traits: Traits = Traits(needs_llm=True)
    edits_allowed: bool = True  # SEARCH/REPLACE against the parent is offered as a reply format

    @property
    def needs_parent(self) -> bool:
        return self.traits.min_parents > 0

    @property
    def min_parents(self) -> int:
        return self.traits.min_parents

    @property
    def all_parents(self) -> bool:  # the prompt shows every parent given (else the first only)
        return self.traits.min_parents > 1


EXPERTS: dict[str, ExpertPrompt] = {e.name: e for e in (
    ExpertPrompt("initializer", "a first correct kernel for the problem, from the reference and retrieved "
                 "examples", "initializer.j2", Traits(starts=True, min_parents=0, needs_llm=True, improves=False),
                 edits_allowed=False),
    ExpertPrompt("repair", "fix a failing candidate from its diagnosis", "repair.j2",
                 Traits(needs_llm=True, improves=False, repair=FIXES, small_edits=True, focus=("repair",))),
    ExpertPrompt("memory", "memory traffic: coalesced and vectorized access, fewer bytes moved, fused passes",
                 "memory.j2", Traits(needs_llm=True, focus=("memory",))),
    ExpertPrompt("compute", "compute throughput: tiling, tl.dot / tensor cores where the tolerance allows, "
                 "pipelining (num_stages), warps", "compute.j2", Traits(needs_llm=True, focus=("compute",))),
    ExpertPrompt("fusion", "fewer kernels and launches", "fusion.j2",
                 Traits(needs_llm=True, focus=("fusion", "launch"))),
    ExpertPrompt("algorithm", "reformulations: algebraic simplification, implicit GEMM, online softmax, "
                 "precomputing from parameters in __init__", "algorithm.j2",
                 Traits(needs_llm=True, changes_approach=True, focus=("algorithm",))),
    ExpertPrompt("crossover", "combine what two or more parents do well", "crossover.j2",
                 Traits(min_parents=2, needs_llm=True, changes_approach=True), edits_allowed=False),
)}


def _parent_view(parent: ParentInfo, label: str) -> dict[str, Any]:
    figures = [f"runtime: {number(parent.runtime_ms, ' ms')}",
               f"speedup vs PyTorch eager: {number(parent.speedup_eager, 'x', 3)}",
               f"speedup vs torch.compile: {number(parent.speedup_compile, 'x', 3)}"]
    if parent.max_abs_error is not None or parent.status == "wrong_output":
        figures.append(f"max abs error: {number(parent.max_abs_error, '', 3)}")
    if parent.max_rel_error is not None:
        figures.append(f"max rel error: {number(parent.max_rel_error, '', 3)}")
    if parent.mismatch_fraction is not None:
        figures.append(f"elements off: {parent.mismatch_fraction:.2%}")
    verdict = f"Verdict: `{parent.status}`" + (f": {parent.message}" if parent.message else "")
    return {"label": label, "verdict": verdict, "checked": parent.checked, "source": parent.source,
            "summary": summary_lines(parent.source), "path": parent.path, "status": parent.status,
            "message": parent.message, "figures": figures, "timed": parent.runtime_ms is not None,
            "derived_for": parent.derived_for, "diagnosis": parent.diagnosis_markdown or "no diagnosis was made"}


def _experience_view(item: dict[str, Any]) -> dict[str, str]:
    code_note = ""
    if item.get("code_left_out"):
        code_note = f"(its code, {item['code_left_out']} tokens, is left out to keep this section in budget)"
    return {"title": str(item.get("title") or "untitled"), "heading": heading(item),
            "text": str(item.get("text", "")).strip(), "source": str(item.get("source") or ""),
            "code": str(item.get("code") or ""), "code_note": code_note}


def _experience_section(experience: list[dict[str, Any]]) -> dict[str, list]:
    """The template's `experience` (items) and `experience_notes` (what the retrieval says of itself). Items
    that were not cut to a budget on retrieval (a list given by hand) are cut here, to the default budget."""
    items = [item for item in experience if not is_note(item)]
    notes = [str(item.get("text") or "") for item in experience if is_note(item)]
    if any("tokens" not in item for item in items):
        items, left_out = fit_items(items, DEFAULT_RETRIEVE_TOKENS)
        if left_out:
            notes.append(left_out_note(left_out, DEFAULT_RETRIEVE_TOKENS, tokenizer().name)["text"])
    return {"experience": [_experience_view(item) for item in items], "experience_notes": notes}


def _check(backend: str, policy: str, precision: str = "fp32") -> None:
    if backend not in BACKENDS:
        raise UsageError(f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)}")
    if policy not in POLICIES:
        raise UsageError(f"unknown policy {policy!r}: use one of {', '.join(POLICIES)}")
    if precision not in PRECISIONS:
        raise UsageError(f"unknown precision {precision!r}: use one of {', '.join(PRECISIONS)}")


def render_system(backend: str = "triton", policy: str = "strict", edits: bool = True) -> str:
    """The system prompt: it depends on the backend, the policy and whether the expert takes SEARCH/REPLACE
    edits only (cacheable by a provider); it describes only the reply format the expert accepts."""
    _check(backend, policy)
    return render_template("system.j2", backend=backend, backend_label=BACKENDS[backend], policy=policy,
                           rejected=rejected_rules(policy), warned=warned_rules(policy), allowed=allowed(backend),
                           edits=edits)


def render(expert_name: str, context: PromptContext) -> tuple[str, str]:
    """(system, user) prompts of `expert_name` for `context`. A SEARCH/REPLACE reply applies to the first
    parent: `parse_reply(reply, context.parents[0].source)`."""
    expert = EXPERTS.get(expert_name)
    if expert is None:
        raise UsageError(f"unknown expert {expert_name!r}: use one of {', '.join(EXPERTS)}")
    _check(context.backend, context.policy, context.precision)
    if len(context.parents) < expert.min_parents:
        raise UsageError(f"the {expert.name} expert needs at least {expert.min_parents} parent candidate(s); "
                         f"got {len(context.parents)}")
    shown = context.parents if expert.all_parents else context.parents[:1] if expert.needs_parent else []
    labels = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    parents = [_parent_view(p, labels[i] if i < len(labels) else str(i + 1)) for i, p in enumerate(shown)]
    roofline = context.roofline_now()
    user = render_template(
        expert.template, expert=expert, problem_name=context.problem_name, problem_source=context.problem_source,
        backend=context.backend, backend_label=BACKENDS[context.backend],
        parents=parents, parent=parents[0] if parents else None,
        edits_allowed=expert.edits_allowed and expert.needs_parent,
        device_lines=device_lines(context.device),
        precision=context.precision, tolerance=f"{context.effective_tolerance:g}",
        loose_tolerance=context.effective_tolerance >= 1e-2, policy=context.policy,
        **_experience_section(context.experience), feedback=list(context.feedback),
        problem_class=context.problem_class, shape_lines=shape_lines(context),
        assumption_lines=assumption_lines(context), strategy=context.strategy,
        other_strategies=list(context.other_strategies), attempt=context.attempt,
        roofline=roofline.line() if roofline is not None else "",
        bound=roofline.bound if roofline is not None else None,
        roof=roofline.roof if roofline is not None else None)
    return render_system(context.backend, context.policy, edits=expert.edits_allowed and expert.needs_parent), user
