"""Shared by the suites' tests: a benchmark problem built at small sizes runs on the CPU, as KernelBench runs it
(training mode), finite and the same twice, and says what it computes."""

from pathlib import Path

import torch


def check_runs_at_small_sizes(path: Path, set_values: dict, min_doc_words: int) -> None:
    from kfoundry.problem import build_model, init_inputs_of, load_problem_module, make_inputs, read_problem

    module = load_problem_module(read_problem(path, set_values))
    model = build_model(module.Model, init_inputs_of(module), 0, None, "cpu", False)
    assert model.training  # as KernelBench runs it: batch norms use batch statistics
    inputs = make_inputs(module, 1, None, "cpu")
    with torch.no_grad():
        first, second = model(*inputs), model(*inputs)
    assert isinstance(first, torch.Tensor) and torch.isfinite(first).all()
    assert torch.equal(first, second)
    assert module.__doc__ and len(module.__doc__.split()) > min_doc_words
