"""The experts. The LLM side: prompt rendering (`render`), reply parsing (`parse_reply`) and the
router that picks the expert for each step. Nothing here calls a model: the generator sends the
rendered prompts to a provider and hands the reply back to `parse_reply`."""

from kfoundry.experts.context import ParentInfo, PromptContext
from kfoundry.experts.llm_experts import BACKENDS, EXPERTS, Expert, render, render_system
from kfoundry.experts.replies import ParsedReply, parse_reply
from kfoundry.experts.router import Router

__all__ = ["BACKENDS", "EXPERTS", "Expert", "ParentInfo", "ParsedReply", "PromptContext", "Router", "parse_reply",
           "render", "render_system"]
