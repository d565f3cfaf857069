import pytest

from kfoundry.errors import UsageError
from kfoundry.optimize import OptimizeSettings
from kfoundry.optimize.settings import DEFAULT_MAX_EVALS


def test_a_run_without_any_budget_gets_the_default_evaluation_budget():
    assert OptimizeSettings().with_default_budget().max_evals == DEFAULT_MAX_EVALS
    assert OptimizeSettings(max_time_s=60).with_default_budget().max_evals is None


@pytest.mark.parametrize(("field", "value", "message"), [
    ("islands", 0, "islands"), ("migrate_every", 0, "migrate"), ("concurrency", 0, "concurrency"),
    ("max_evals", 0, "max-evals"), ("max_cost", -1.0, "max-cost"), ("max_time_s", 0.0, "max-time"),
    ("target_roofline", 1.5, "fraction"), ("backend", "opencl", "backend")])
def test_bad_settings_are_usage_errors(field, value, message):
    with pytest.raises(UsageError, match=message):
        OptimizeSettings(**{field: value}).validate()


def test_settings_round_trip_through_json_and_ignore_unknown_keys():
    settings = OptimizeSettings(islands=2, llm=["cmd:echo"], target_speedup=1.5)
    again = OptimizeSettings.from_dict({**settings.to_dict(), "from_a_newer_version": 1})
    assert again == settings
