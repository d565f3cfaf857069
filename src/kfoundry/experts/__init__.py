"""The experts. `base` is what every expert is to the search (traits, propose); `registry` builds the
enabled ones; the LLM side renders prompts (`render`), parses replies (`parse_reply`) and takes one LLM
step (`llm_step`); the router picks the expert for each step. Names are imported on first use, so
that `kfoundry.experts.base` stays free of the rest (kfoundry.search imports it)."""

from importlib import import_module

_WHERE = {
    "BACKENDS": "llm_experts", "EXPERTS": "llm_experts", "ExpertPrompt": "llm_experts", "render": "llm_experts",
    "render_system": "llm_experts", "ParentInfo": "context", "PromptContext": "context",
    "ParsedReply": "replies", "parse_reply": "replies", "Router": "router",
    "Expert": "base", "Proposal": "base", "Step": "base", "Traits": "base",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'kfoundry.experts' has no attribute {name!r}")
    value = getattr(import_module(f"kfoundry.experts.{_WHERE[name]}"), name)
    globals()[name] = value
    return value
