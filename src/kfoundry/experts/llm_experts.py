"""The LLM experts: each is a concern and a prompt template. `render` gives the (system, user)
prompts for one step; the generator sends them to a provider and hands the reply to `parse_reply`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kfoundry.errors import UsageError
from kfoundry.experts.context import ParentInfo, PromptContext
from kfoundry.experts.device_text import device_lines
from kfoundry.experts.rules import allowed, rejected_rules, warned_rules
from kfoundry.experts.templates import number, render_template
from kfoundry.guard.findings import POLICIES
from kfoundry.problem import PRECISIONS

BACKENDS = {"triton": "Triton", "cuda": "CUDA C++ (torch.utils.cpp_extension.load_inline)"}
MAX_EXPERIENCE_CHARS = 4000  # per item: the library decides how many, this keeps one from flooding a prompt


@dataclass(frozen=True)
class Expert:
    name: str
    concern: str
    template: str
    needs_parent: bool = True
    min_parents: int = 1
    edits_allowed: bool = True  # SEARCH/REPLACE against the parent is offered as a reply format
    all_parents: bool = False  # the prompt shows every parent given (else the first only)


EXPERTS: dict[str, Expert] = {e.name: e for e in (
    Expert("initializer", "a first correct kernel for the problem, from the reference and retrieved examples",
           "initializer.j2", needs_parent=False, min_parents=0, edits_allowed=False),
    Expert("repair", "fix a failing candidate from its diagnosis", "repair.j2"),
    Expert("memory", "memory traffic: coalesced and vectorized access, fewer bytes moved, fused passes",
           "memory.j2"),
    Expert("compute", "compute throughput: tiling, tl.dot / tensor cores where the tolerance allows, "
           "pipelining (num_stages), warps", "compute.j2"),
    Expert("fusion", "fewer kernels and launches", "fusion.j2"),
    Expert("algorithm", "reformulations: algebraic simplification, implicit GEMM, online softmax, "
           "precomputing from parameters in __init__", "algorithm.j2"),
    Expert("crossover", "combine what two or more parents do well", "crossover.j2", min_parents=2,
           edits_allowed=False, all_parents=True),
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
    return {"label": label, "verdict": verdict, "source": parent.source, "path": parent.path, "status": parent.status,
            "message": parent.message, "figures": figures,
            "diagnosis": parent.diagnosis_markdown or "no diagnosis was made"}


def _experience_view(item: dict[str, Any]) -> dict[str, str]:
    text = str(item.get("text", "")).strip()
    if len(text) > MAX_EXPERIENCE_CHARS:
        text = text[:MAX_EXPERIENCE_CHARS] + " ... (clipped)"
    title, source = str(item.get("title") or "untitled"), str(item.get("source") or "")
    return {"title": title, "heading": title + (f" (from {source})" if source else ""), "text": text,
            "source": source, "code": str(item.get("code") or "")}


def _check(backend: str, policy: str, precision: str = "fp32") -> None:
    if backend not in BACKENDS:
        raise UsageError(f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)}")
    if policy not in POLICIES:
        raise UsageError(f"unknown policy {policy!r}: use one of {', '.join(POLICIES)}")
    if precision not in PRECISIONS:
        raise UsageError(f"unknown precision {precision!r}: use one of {', '.join(PRECISIONS)}")


def render_system(backend: str = "triton", policy: str = "strict") -> str:
    """The system prompt: it depends on the backend and the policy only (cacheable by a provider)."""
    _check(backend, policy)
    return render_template("system.j2", backend=backend, backend_label=BACKENDS[backend], policy=policy,
                           rejected=rejected_rules(policy), warned=warned_rules(policy), allowed=allowed(backend))


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
    user = render_template(
        expert.template, expert=expert, problem_name=context.problem_name, problem_source=context.problem_source,
        backend=context.backend, backend_label=BACKENDS[context.backend],
        parents=parents, parent=parents[0] if parents else None,
        edits_allowed=expert.edits_allowed and expert.needs_parent,
        device_lines=device_lines(context.device),
        precision=context.precision, tolerance=f"{context.effective_tolerance:g}",
        loose_tolerance=context.effective_tolerance >= 1e-2, policy=context.policy,
        experience=[_experience_view(item) for item in context.experience], feedback=list(context.feedback))
    return render_system(context.backend, context.policy), user
