"""One expert step: pick an expert, render its prompt, ask the LLM, parse the reply, write the
candidate, evaluate it. `kfoundry generate` runs it once; the search repeats it.

An unusable reply (no code, a refusal, a SEARCH block that does not apply, code that does not
parse) is a structured failure whose reason goes into the next attempt's prompt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kfoundry.errors import UsageError
from kfoundry.evaluate import EvalOptions, Evaluator
from kfoundry.llm.settings import LLMSettings
from kfoundry.problem import read_source
from kfoundry.types import Evaluation, to_jsonable

Progress = Callable[[str], None]


@dataclass
class Attempt:
    """One LLM call: what was asked, what came back, and what became of it."""

    expert: str
    reply: dict[str, Any] | None = None  # LLMReply.to_dict()
    reply_kind: str | None = None  # file or search_replace
    failure: str | None = None  # why the reply (or the call) gave no candidate


@dataclass
class GenerateResult:
    expert: str
    reason: str  # why this expert
    attempts: list[Attempt] = field(default_factory=list)
    candidate_path: str | None = None
    evaluation: Evaluation | None = None
    parents: list[dict[str, Any]] = field(default_factory=list)  # path, status, message of each parent
    prompt: dict[str, str] = field(default_factory=dict)  # system, user (the last attempt's)

    @property
    def ok(self) -> bool:
        return self.evaluation is not None and self.evaluation.ok

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable(self)


def make_llm(specs: list[str], settings: LLMSettings, api_keys: dict[str, str]) -> tuple[Any, Any]:
    """The provider (or ensemble, or recording wrapper) of `specs`, built with `settings`, and its budget."""
    from kfoundry.llm import Budget, Ensemble, Pricing, make_provider, record_provider

    if not specs:
        raise UsageError("no LLM given: use --llm SPEC (openai:MODEL, openai:MODEL@URL, anthropic:MODEL, "
                         "cmd:COMMAND, replay:FILE.jsonl), KFOUNDRY_LLM or llm = [...] in kfoundry.toml")
    pricing = Pricing.load(Path(settings.pricing) if settings.pricing else None)
    providers = [make_provider(spec, timeout_s=settings.llm_timeout, max_retries=settings.llm_retries,
                               concurrency=settings.llm_concurrency, pricing=pricing, api_keys=api_keys)
                 for spec in specs]
    budget = Budget(settings.budget_dollars, settings.budget_tokens)
    budget.check_start(providers, pricing)
    weights = settings.llm_weights or None
    if weights is not None and len(weights) != len(providers):
        raise UsageError(f"--llm-weights has {len(weights)} weight(s) for {len(providers)} provider(s)")
    llm = providers[0] if len(providers) == 1 else Ensemble(providers, weights)
    if settings.record:
        llm = record_provider(llm, Path(settings.record))
    return llm, budget


def _default_out(problem: Path, expert: str) -> Path:
    stem = re.sub(r"\W+", "_", problem.stem)
    base = Path.cwd() / f"{stem}_{expert}.py"
    number = 1
    while base.exists():
        number += 1
        base = Path.cwd() / f"{stem}_{expert}_{number}.py"
    return base


def _problem_view(problem: Path, options: EvalOptions) -> tuple[str, Any]:
    """The problem's class and the facts of its inputs at the sizes under test, for the prompt; the general
    class and no facts where the reference cannot be run here (the prompt then says less, nothing wrong)."""
    from kfoundry.input_facts import problem_facts
    from kfoundry.problem_signature import problem_class, signature

    try:
        sig = signature(problem, options.set_values)
        return problem_class(sig), problem_facts(problem, options.set_values, options.precision,
                                                 outputs=sig.get("outputs"))
    except Exception:  # noqa: BLE001 -- a reference that runs in the evaluator but not here
        return "other", None


def generate(problem: str | Path, llm, *, expert: str | None = None, parents: list[str | Path] = (),
             options: EvalOptions | None = None, backend: str = "triton", out: str | Path | None = None,
             attempts: int = 1, budget=None, experience: list[dict] | None = None,
             progress: Progress | None = None, target_gpu: str | None = None) -> GenerateResult:
    """One expert step for `problem` with `llm` (a kfoundry.llm Provider). Parents are evaluated
    first (their diagnoses steer the expert and fill its prompt). On a CPU the prompt shows
    `target_gpu`'s datasheet figures (a typical GPU's when None); on a GPU, the GPU's own."""
    from kfoundry.evaluate.shared.device_facts import prompt_device, target_facts
    from kfoundry.experts import EXPERTS, ParentInfo, PromptContext, Router, render
    from kfoundry.experts.roofline_text import estimate
    from kfoundry.experts.llm_step import ask

    if backend not in ("triton", "cuda"):
        raise UsageError(f"unknown backend {backend!r}: use triton or cuda")
    if target_gpu:
        target_facts(target_gpu)  # an unknown name stops here, saying which are known
    if attempts < 1:
        raise UsageError("--attempts must be at least 1")
    progress = progress or (lambda message: None)
    problem = Path(problem)
    options = options or EvalOptions()
    with Evaluator(problem, options, progress, wait_baselines=True) as evaluator:
        prepared = evaluator.prepare()  # a bad problem stops here, before any LLM call
        infos, parent_records, diagnoses = [], [], []
        for path in parents:
            path = Path(path)
            source = read_source(path, UsageError, "parent")
            progress(f"evaluating parent {path.name}")
            evaluation = evaluator.evaluate(path)
            infos.append(ParentInfo.from_evaluation(source, evaluation, path=str(path)))
            diagnoses.append(evaluation.diagnosis)
            parent_records.append({"path": str(path), "status": evaluation.status, "message": evaluation.message})
        if expert is None:
            diagnosis = diagnoses[0] if diagnoses else None
            chosen, reason = Router().choose_with_reason(diagnosis, has_parent=bool(parents),
                                                         parents_available=len(parents))
            expert = chosen.name
        else:
            reason = "chosen with --expert"
        if expert not in EXPERTS:
            raise UsageError(f"unknown expert {expert!r}: choose from {', '.join(EXPERTS)}")
        result = GenerateResult(expert=expert, reason=reason, parents=parent_records)
        problem_class, facts = _problem_view(problem, options)
        shown_device = prompt_device(prepared.device_facts, target_gpu)
        context = PromptContext(
            problem_source=evaluator.source.text, problem_name=problem.stem, backend=backend, parents=infos,
            device=shown_device, precision=options.precision,
            tolerance=options.atol, policy=options.policy, experience=list(experience or []), feedback=[],
            problem_class=problem_class, facts=facts, timed=evaluator.device != "cpu", trials=options.trials,
            roofline=estimate(problem, options.precision, options.atol, shown_device, options.eval_mode))
        parent_source = infos[0].source if infos else None
        for number in range(attempts):
            system, user = render(expert, context)
            result.prompt = {"system": system, "user": user}
            attempt = Attempt(expert=expert)
            result.attempts.append(attempt)
            if not (budget is not None and budget.exhausted):
                progress(f"asking the LLM ({expert}, attempt {number + 1} of {attempts})")
            step = ask(llm, budget, system, user, parent_source)
            attempt.failure, attempt.reply_kind = step.failure, step.reply_kind
            attempt.reply = step.reply.to_dict() if step.reply is not None else None
            if not step.called:  # the budget is spent
                break
            if step.source is None:
                if step.reply is not None:  # a reply that gave no kernel: its reason goes into the next prompt
                    context.feedback.append(f"attempt {number + 1}: {step.failure}")
                continue
            path = Path(out) if out else _default_out(problem, expert)
            path.write_text(step.source, encoding="utf-8")
            result.candidate_path = str(path)
            progress(f"evaluating the candidate {path.name}")
            result.evaluation = evaluator.evaluate(path)
            break
    return result
