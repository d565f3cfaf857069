"""kfoundry.experts.llm_expert: an LLM expert renders its prompt with the retrieved experience and the
parents' verdicts, logs it, and keeps the call in its proposal's record; a spent budget sends nothing."""

import asyncio
import shlex
import sys

from kfoundry.experts import EXPERTS, ParentInfo, PromptContext
from kfoundry.experts.base import Step
from kfoundry.experts.llm_expert import LLMExpert, PromptLog
from kfoundry.llm import make_provider
from kfoundry.search.individual import Individual
from tests.optimize.helpers import AFFINE, AFFINE_KERNEL, WRITER, prompts


def _expert(tmp_path, name, log_file, budget=None):
    spec = "cmd:" + " ".join(shlex.quote(w) for w in [sys.executable, str(WRITER), str(log_file)])
    context = PromptContext(problem_source=AFFINE.read_text(), problem_name="affine",
                            experience=[{"title": "a retrieved note", "text": "use a masked 1-D kernel"}])
    return LLMExpert(EXPERTS[name], context, make_provider(spec), budget, PromptLog(tmp_path / "prompts"))


def test_an_llm_expert_renders_its_prompt_with_the_experience_and_keeps_the_call(tmp_path):
    log = tmp_path / "llm.log"
    proposal = asyncio.run(_expert(tmp_path, "initializer", log).propose(Step(None, [], "no parent yet")))
    assert proposal.source and "class ModelNew" in proposal.source and proposal.parent_ids == []
    assert "use a masked 1-D kernel" in prompts(log)[0]  # the retrieved experience reached the prompt
    assert len(list((tmp_path / "prompts").glob("*_initializer.md"))) == 1
    call = proposal.record["llm_call"]
    assert call["expert"] == "initializer" and call["reply"]["text"] and len(call["prompt_hash"]) == 64
    assert call["failure"] is None
    # the reply beside its prompt, under the same name
    assert (tmp_path / "replies" / "0001_initializer.md").read_text() == call["reply"]["text"]
    assert (tmp_path / "prompts" / "0001_initializer.md").read_text().startswith("# system\n\n")


def test_the_parents_verdict_and_diagnosis_reach_a_repair_prompt(tmp_path):
    log = tmp_path / "llm.log"
    parent = Individual(id="3", source=AFFINE_KERNEL.read_text(), status="wrong_output")
    parent.parent_info = ParentInfo(source=parent.source, path="candidate 3", status="wrong_output",
                                    message="values off at [0, 1]", diagnosis_markdown="the mask is wrong")
    proposal = asyncio.run(_expert(tmp_path, "repair", log).propose(Step(parent, [], "it fails")))
    prompt = prompts(log)[0]
    assert "values off at [0, 1]" in prompt and "the mask is wrong" in prompt and proposal.parent_ids == ["3"]


def test_a_spent_budget_sends_nothing(tmp_path):
    class Spent:
        exhausted = True

    log = tmp_path / "llm.log"
    proposal = asyncio.run(_expert(tmp_path, "initializer", log, budget=Spent()).propose(Step()))
    assert proposal.source is None and proposal.record == {} and not log.exists()
    assert not (tmp_path / "replies").exists()  # no reply, no reply file


def test_the_prompt_log_numbers_on_from_what_is_there(tmp_path):
    PromptLog(tmp_path).write("memory", "s", "u")
    PromptLog(tmp_path).write("repair", "s", "u")
    assert sorted(p.name for p in tmp_path.glob("*.md")) == ["0001_memory.md", "0002_repair.md"]
    PromptLog(None).write("memory", "s", "u")  # no folder: nothing written


def test_each_islands_first_kernel_is_asked_for_its_own_strategy_and_told_the_others(tmp_path):
    log = tmp_path / "llm.log"
    expert = _expert(tmp_path, "initializer", log)
    expert.context.problem_class = "scan"
    records = [asyncio.run(expert.propose(Step(None, [], "no parent yet", island=i, islands=3))).record
               for i in range(3)]
    sent = prompts(log)
    assert [r["strategy"] for r in records] == ["block scan with a carry", "decoupled look-back", "three phases"]
    strategies = [p.split("## Your strategy: ")[1].split("\n")[0] for p in sent]
    assert strategies == [r["strategy"] for r in records]
    assert "- decoupled look-back:" in sent[0] and "- three phases:" in sent[0]  # what the other islands were asked
    assert "- block scan with a carry:" not in sent[0]
    assert len(set(sent)) == 3
    assert "For a scan problem:" in sent[0] and "tl.dot" not in sent[0].split("## What to do")[1]


def test_no_two_prompts_of_a_run_are_the_same_and_each_says_which_request_it_is(tmp_path):
    log = tmp_path / "llm.log"
    working = Individual(id="5", source=AFFINE_KERNEL.read_text(), status="ok", fitness=1.0)
    failing = Individual(id="6", source=AFFINE_KERNEL.read_text().replace("BLOCK", "BLK"), status="wrong_output")
    memory, repair, initializer = (_expert(tmp_path, name, log) for name in ("memory", "repair", "initializer"))
    for _ in range(2):
        asyncio.run(memory.propose(Step(working, [], "the diagnosis's focus is memory")))
        asyncio.run(repair.propose(Step(failing, [], "the parent fails")))
        asyncio.run(initializer.propose(Step(None, [], "no parent yet", island=1, islands=2)))
    sent = prompts(log)
    assert len(sent) == 6 and len(set(sent)) == 6  # none repeats another byte for byte
    firsts = [p for p in sent if "This request: the first request" in p]
    assert len(firsts) == 3 and all("Why this step:" in p for p in sent)
    assert any("This request: sample 2 of the memory expert on this parent" in p for p in sent)
    assert any("This request: retry 2 on this failing parent" in p and "write a different fix" in p for p in sent)
    assert any("sample 2 of the initializer expert on island 1's first kernel" in p for p in sent)
