"""kfoundry.evaluate.options: what changes a verdict is named once, for the run store and the bench."""

import json

from kfoundry.evaluate.options import VERDICT_FIELDS, EvalOptions


def test_the_verdict_settings_are_json_and_leave_out_where_the_work_runs():
    options = EvalOptions(device="cpu", trials=2, workers=3, cache_dir=None, set_values={"n": 4})
    data = options.verdict_settings()
    assert tuple(data) == VERDICT_FIELDS and data["trials"] == 2 and data["baselines"] == ["eager", "compile"]
    assert "workers" not in data and "cache_dir" not in data and "set_values" not in data
    assert json.loads(json.dumps(data)) == data
    again = EvalOptions(**{**data, "baselines": tuple(data["baselines"])})
    assert again.verdict_settings() == data


def test_baselines_are_checked_by_name():
    import pytest

    from kfoundry.errors import UsageError

    EvalOptions(device="cpu", baselines=("eager", "compile-max-autotune-no-cudagraphs")).validate()
    with pytest.raises(UsageError, match="max-autotune-nocudagraphs"):
        EvalOptions(device="cpu", baselines=("compile-max-autotune-nocudagraphs",)).validate()
