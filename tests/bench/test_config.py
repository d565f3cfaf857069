"""kfoundry.bench.config: a bench's whole run config checked, described for bench.json, fingerprinted."""

import pytest

from kfoundry.bench.config import describe, fingerprint, labels, validate
from kfoundry.bench.settings import BenchSettings
from kfoundry.errors import UsageError
from kfoundry.evaluate.parent.options import EvalOptions
from kfoundry.optimize.settings import OptimizeSettings
from kfoundry.run_config import RunConfig


def config(options=None, **bench):
    return RunConfig(search=OptimizeSettings(llm=["replay:x.jsonl"], max_evals=3),
                     eval=options or EvalOptions(device="cpu"), bench=BenchSettings(method="optimize", **bench))


def test_devices_and_a_device_exclude_each_other():
    validate(config(options=EvalOptions(), devices="cpu:2"))
    with pytest.raises(UsageError, match="exclude each other"):
        validate(config(options=EvalOptions(device="cpu"), devices="cpu:2"))


def test_the_description_and_the_fingerprint_follow_the_settings_and_the_problem():
    described = describe(config())
    assert described["method"] == "optimize" and described["max_evals"] == 3
    assert described["options"]["guard"] is True and described["llm"] == ["replay:x.jsonl"]
    first = fingerprint(config(), "problem text", {})
    assert fingerprint(config(), "problem text", {}) == first
    assert fingerprint(config(), "other text", {}) != first
    assert fingerprint(config(), "problem text", {"n": 4}) != first
    assert labels(config())["trials"] == EvalOptions().trials
