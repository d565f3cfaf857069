"""kfoundry.evaluate.parent.options: what changes a verdict is named once, for the run store and the bench."""

import json

from kfoundry.evaluate.parent.options import VERDICT_FIELDS, EvalOptions


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


def test_cuda_resolves_to_the_first_gpu_without_initializing_cuda(monkeypatch):
    """The main process never touches the GPU: torch.cuda.is_available and device_count make no context (NVML
    shows no memory for the process), current_device initializes CUDA."""
    import torch

    from kfoundry.evaluate.parent.options import resolve_device

    def initializes(*args, **kwargs):
        raise AssertionError("the main process initialized CUDA")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", initializes)
    monkeypatch.setattr(torch.cuda, "_lazy_init", initializes)
    assert resolve_device("cuda", "fp32") == "cuda:0"
    assert resolve_device(None, "fp32") == "cuda:0"
    assert resolve_device("cuda:1", "bf16") == "cuda:1"
