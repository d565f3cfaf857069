"""When an LLM is configured: the run's steps summarized by it into insights for the library (the
rule-based distillation runs always, this adds to it)."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from kfoundry.experts.templates import render_template
from kfoundry.library.distil import measured

MAX_STEPS = 40
MAX_INSIGHTS = 3
_LINE = re.compile(r"^\s*[-*]\s+(.{20,400})$")


def _speed(step: dict[str, Any]) -> str:
    before, after = step.get("speedup_before"), step.get("speedup_after")
    if after is None:
        return "none (the child failed)"
    return f"{before:.3g}x -> {after:.3g}x" if before is not None else f"{after:.3g}x (its parent was not timed)"


def insight_prompt(steps: list[dict[str, Any]], problem_name: str, kind: str, device: str | None) -> str:
    """The distiller's prompt, one measured step per line (callers pass only those: see `measured`)."""
    shown = [{"n": i + 1, "expert": s["expert"], "diagnosis": ", ".join(s.get("diagnosis") or []),
              "outcome": s["outcome"], "speed": _speed(s), "summary": s.get("summary", "")}
             for i, s in enumerate(steps[-MAX_STEPS:])]
    return render_template("insights.j2", steps=shown, problem_name=problem_name, kind=kind or "other",
                           device=device or "unknown", limit=MAX_INSIGHTS)


def parse_insights(text: str) -> list[str]:
    return [m.group(1).strip() for m in map(_LINE.match, text.splitlines()) if m][:MAX_INSIGHTS]


def summarize_run(llm: Any, budget: Any, store: Any, library: Any, run_id: str, signature: dict[str, Any],
                  problem_name: str, device: str | None) -> list[int]:
    """Ask the LLM for insights on this run's steps; store them in the library. Returns their ids."""
    from kfoundry.llm import LLMError

    steps = [s for s in library.steps() if s.get("run_id") == run_id and measured(s)]
    # nothing timed (a CPU run) and nothing failed: there is nothing an insight could rest on
    if not any(s.get("speedup_after") is not None for s in steps) or (budget is not None and budget.exhausted):
        return []
    user = insight_prompt(steps, problem_name, signature.get("kind", ""), device)
    system = "You distil optimization logs into short, factual insights."
    prompt_hash = hashlib.sha256(f"{system}\n\x00\n{user}".encode()).hexdigest()
    try:
        reply = llm.complete(system, user)
    except LLMError as exc:
        store.add_llm_call(None, "insights", None, prompt_hash, failure=f"{exc.reason}: {exc}")
        return []
    if budget is not None:
        budget.charge(reply)
    store.add_llm_call(None, "insights", reply.to_dict(), prompt_hash)
    evidence = [s["id"] for s in steps]
    return [library.add_insight(text, signature, evidence, origin="llm") for text in parse_insights(reply.text)]
