import asyncio
import shlex
import sys
from pathlib import Path

from kfoundry.experts import PromptContext
from kfoundry.llm import make_provider
from kfoundry.optimize.proposers import Proposer
from kfoundry.runs import RunStore
from kfoundry.runs.hashing import source_hash
from kfoundry.search.individual import Individual
from tests.optimize.helpers import AFFINE, AFFINE_KERNEL, WRITER, prompts


def _proposer(tmp_path, llm=None, known=()):
    store = RunStore.create(tmp_path / "run", AFFINE, {}, seed=0)
    context = PromptContext(problem_source=AFFINE.read_text(), problem_name="affine",
                            experience=[{"title": "a retrieved note", "text": "use a masked 1-D kernel"}])
    return store, Proposer(store=store, context=context, device=None, evaluations={}, seed=0, llm=llm,
                           is_known=lambda h: h in known, prompts_dir=tmp_path / "prompts")


def test_the_tuner_proposes_a_new_variant_and_remembers_its_changes(tmp_path):
    store, proposer = _proposer(tmp_path)
    parent = Individual(id="1", source=AFFINE_KERNEL.read_text(), status="ok", fitness=1.0)
    source = asyncio.run(proposer(parent, [], "tuner"))
    assert source and source != parent.source
    assert proposer.tuned[source_hash(source)]["changes"]
    assert asyncio.run(proposer(None, [], "tuner")) is None  # nothing to tune
    store.close()


def test_the_tuner_switches_a_dot_precision_on_some_turns_and_remembered_ones_first(tmp_path, monkeypatch):
    from kfoundry.optimize import proposers

    gemm = (Path(__file__).resolve().parents[2] / "examples" / "linear_epilogue" / "kernel.py").read_text()
    parent = Individual(id="1", source=gemm, status="ok", fitness=1.0)
    store, proposer = _proposer(tmp_path)
    monkeypatch.setattr(proposers, "PRECISION_SHARE", 1.0)
    source = asyncio.run(proposer(parent, [], "tuner"))
    assert 'input_precision="tf32x3"' in source
    assert proposer.tuned[source_hash(source)]["changes"] == {"dot_precision": {"from": 0, "to": 1}}
    store.close()
    store, proposer = _proposer(tmp_path / "again")
    monkeypatch.setattr(proposers, "PRECISION_SHARE", 0.0)
    assert 'input_precision="ieee"' in asyncio.run(proposer(parent, [], "tuner"))  # block sizes, not the precision
    proposer.preferred = {"dot_precision": 1}  # a switch to TF32x3 helped on a similar problem
    assert 'input_precision="tf32x3"' in asyncio.run(proposer(parent, [], "tuner"))
    store.close()


def test_an_llm_expert_renders_its_prompt_with_the_experience_and_the_call_is_stored(tmp_path):
    log = tmp_path / "llm.log"
    spec = "cmd:" + " ".join(shlex.quote(w) for w in [sys.executable, str(WRITER), str(log)])
    store, proposer = _proposer(tmp_path, llm=make_provider(spec))
    source = asyncio.run(proposer(None, [], "initializer"))
    assert source and "class ModelNew" in source
    assert "use a masked 1-D kernel" in prompts(log)[0]  # the retrieved experience reached the prompt
    assert len(list((tmp_path / "prompts").glob("*_initializer.md"))) == 1
    proposer.claim_call(source_hash(source), None)
    assert store.totals()["llm_calls"] == 1
    store.close()


def test_without_an_llm_an_llm_expert_proposes_nothing(tmp_path):
    store, proposer = _proposer(tmp_path)
    assert asyncio.run(proposer(None, [], "initializer")) is None
    store.close()
