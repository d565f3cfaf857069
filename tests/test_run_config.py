"""kfoundry.run_config: one object for what a run runs with, as the run store keeps it."""

import json

import pytest

from kfoundry.bench.settings import BenchSettings
from kfoundry.errors import UsageError
from kfoundry.evaluate import EvalOptions
from kfoundry.llm.settings import LLMSettings
from kfoundry.optimize.settings import OptimizeSettings
from kfoundry.run_config import RunConfig


def test_it_round_trips_through_json_as_the_store_keeps_it():
    config = RunConfig(search=OptimizeSettings(islands=2, llm=["cmd:echo"], max_evals=9),
                       eval=EvalOptions(device="cpu", trials=2, set_values={"n": 8}, baselines=("eager",)),
                       llm=LLMSettings(llm_timeout=900.0, llm_retries=2), bench=BenchSettings(method="reference"),
                       seeds=["a.py"])
    config.validate()
    data = json.loads(json.dumps(config.to_dict()))
    assert set(data) == {"search", "eval", "llm", "seeds"}  # the bench keeps its own record
    assert data["llm"]["llm_timeout"] == 900.0 and "llm" not in data["llm"]  # the specs are the search's
    back = RunConfig.from_dict(data)
    assert back.search == config.search and back.llm == config.llm and back.seeds == ["a.py"]
    assert back.eval.verdict_settings() == config.eval.verdict_settings() and back.eval.set_values == {"n": 8}
    assert back.to_dict() == data


def test_a_store_of_an_earlier_version_reads_back_and_bad_sections_are_refused():
    old = RunConfig(search=OptimizeSettings(), eval=EvalOptions(device="cpu")).to_dict()
    assert "llm" not in old  # nothing to keep without an LLM
    assert RunConfig.from_dict({"search": old["search"], "eval": old["eval"]}).llm is None  # today's, then
    stored = {"llm_timeout": 30.0, "llm_retries": 1, "budget_dollars": None}  # as a store of last week has it
    assert RunConfig.from_dict({**old, "llm": stored}).llm == LLMSettings(llm_timeout=30.0, llm_retries=1)
    with pytest.raises(UsageError, match="islands"):
        RunConfig(search=OptimizeSettings(islands=0)).validate()
