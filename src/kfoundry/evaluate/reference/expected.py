"""The judge's input sets and what is expected of them: the problem's model (and its float64 copy), each
set's inputs, the reference's outputs and their float64 truth, kept where the memory plan says
(kfoundry.evaluate.parent.memory_plan's tiers):

- `resident`: every set on the judge's device, computed once;
- `host`: every set's expected outputs (reference and truth) in host memory, computed once; the set in
  use is brought to the device, its inputs drawn again from their seed;
- `per_set`: one set at a time on the device, computed again when another is asked for.

The float64 truth is computed on the judge's device, on the host (a float64 copy of the model there),
or not at all (it did not fit). Outside the resident tier it is made only when a comparison needs it:
an output that is allclose to the reference needs no arbiter.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from kfoundry import problem as problems
from kfoundry.errors import ProblemError
from kfoundry.evaluate.reference import truth as truths
from kfoundry.evaluate.reference.compare import IndexSource, flatten_outputs
from kfoundry.evaluate.reference.index_sources import IndexRecorder
from kfoundry.evaluate.reference.reference_job import clone_inputs, draw_inputs, synchronize, upcast, with_outliers

HIDDEN_SETS = ("probe", "outlier")  # input sets the guard uses, never the trials
SMALL_OUTPUT = 64 << 20  # an output below this is always copied out of the forward (cheap, and never aliased)


def inputs_changed(before: list, after: list) -> int | None:
    """Index of the first input tensor that differs between the two lists, if any."""
    for i, (a, b) in enumerate(zip(before, after)):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            if a.shape != b.shape or a.dtype != b.dtype:
                return i
            b = b.to(a.device)
            same = a == b
            if a.is_floating_point():
                same |= torch.isnan(a) & torch.isnan(b)
            if not bool(same.all()):
                return i
    return None


def _storages(tensors) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors if isinstance(t, torch.Tensor)}


def detached(value: Any, owned: set[int] = frozenset()) -> Any:
    """Outputs as plain tensors, each a copy where it shares memory with `owned` (the model's parameters and
    buffers: a later forward may change them in place) or is small; a large output the forward made is
    taken as it is (a copy of a 9 GB output is 9 GB more)."""
    if isinstance(value, torch.Tensor):
        plain = value.detach().as_subclass(torch.Tensor)
        small = plain.numel() * plain.element_size() <= SMALL_OUTPUT
        return plain.clone() if small or plain.untyped_storage().data_ptr() in owned else plain
    if isinstance(value, (list, tuple)):
        return [detached(v, owned) for v in value]
    if isinstance(value, dict):
        return {k: detached(v, owned) for k, v in value.items()}
    return value


def _moved(value: Any, device: str) -> Any:
    """Tensors and truth corrections of a nested value on `device`. To the host they go to pageable memory:
    torch's pinned allocator rounds each block up to a power of two (a 6.4 GB output took 8 GB, and seven sets'
    outputs and truths took the judge past 110 GB on the H200)."""
    if isinstance(value, (torch.Tensor, truths.Correction)):
        return value.to(device)
    if isinstance(value, list):
        return [_moved(v, device) for v in value]
    if isinstance(value, dict):
        return {k: _moved(v, device) for k, v in value.items()}
    return value


def _float64_copy(inputs: list, home: str) -> list:
    """The inputs the float64 forward runs on, on `home`: float tensors cast (a new tensor each), the others
    copied (the forward may change them in place; the set's own inputs must stay as they are)."""
    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            out.append(x.to(home, torch.float64) if x.is_floating_point() else x.to(home, copy=True))
        else:
            out.append(upcast(copy.deepcopy(x)))
    return out


class ExpectedSet:
    """One input set: its inputs, the reference's output on them and the float64 truth (the truth's
    leaves, float ones held as corrections: kfoundry.evaluate.reference.truth; None until it is made)."""

    def __init__(self, name: str, seed: int, inputs: list | None, reference: Any, truth: Any,
                 index_sources: dict[int, IndexSource], inputs_after: list | None) -> None:
        self.name, self.seed, self.inputs = name, seed, inputs
        self.reference, self.truth, self.index_sources = reference, truth, index_sources
        self.inputs_after = inputs_after  # None: the reference leaves its inputs as they were


class Reference:
    """The problem's model on the judge's device, its float64 copy where the truth is made, and every set
    by name, kept as the plan's tier says."""

    def __init__(self, job: dict[str, Any], channel) -> None:
        self.job, self.channel = job, channel
        self.device = job["device"]
        self.dtype = problems.torch_dtype(job["precision"])
        source = problems.ProblemSource(path=Path(job["problem_path"]), text=job["problem_text"],
                                        overrides=job["overrides"])
        self.module = problems.load_problem_module(source)
        self.init_inputs = problems.init_inputs_of(self.module)
        try:
            self.model = problems.build_model(self.module.Model, self.init_inputs, job["init_seed"], self.dtype,
                                              self.device, job["eval_mode"])
        except Exception as exc:
            raise ProblemError(f"constructing the problem's Model raised {type(exc).__name__}: {exc}") from None
        self.owned = _storages(list(self.model.parameters()) + list(self.model.buffers()))
        trials = list(job["trial_seeds"])
        self.seeds = {str(k): seed for k, seed in enumerate(trials)}
        self.seeds["probe"] = job["probe_seed"]
        self.seeds["outlier"] = job["probe_seed"] + 1
        self.names = [str(k) for k in range(len(trials))] + list(HIDDEN_SETS)
        self.sets: dict[str, ExpectedSet] = {}  # on the device: all of them (resident), else the one in use
        self.on_host: dict[str, ExpectedSet] = {}  # the host tier's sets, without their inputs
        self.tier, self.truth_place = "resident", "device"
        self.truth_status = "float64"
        self.model64 = None

    def set_plan(self, tier: str, truth: str) -> None:
        """Where the sets are kept and the truth is made (the memory plan's `tier` and `truth`)."""
        self.tier, self.truth_place = tier, truth
        if truth == "none":
            self.truth_status = ("unavailable: the float64 truth does not fit in memory at these sizes "
                                 "(outputs are judged against the reference alone)")
            return
        try:
            home = self.device if truth == "device" else "cpu"
            self.model64 = copy.deepcopy(self.model).to(device=home, dtype=torch.float64)
        except Exception as exc:
            self.truth_status = f"unavailable: the model could not be cast to float64 ({type(exc).__name__}: {exc})"

    @property
    def resident(self) -> bool:
        return self.tier == "resident"

    def make_inputs(self, name: str) -> list:
        """A set's inputs, new tensors: set 0's with sparse outliers for `outlier` (from the kept set 0 where
        it is kept: with_outliers copies), else drawn from the set's seed."""
        if name == "outlier":
            kept = self.sets.get("0")
            return with_outliers(kept.inputs if kept is not None else self.make_inputs("0"), self.seeds["outlier"])
        return draw_inputs(self.module, self.seeds[name], self.dtype, self.device)

    def compute(self, name: str, with_truth: bool = True) -> ExpectedSet:
        inputs = self.make_inputs(name)
        seed = self.seeds[name]
        recorder = IndexRecorder()
        run_inputs = clone_inputs(inputs)
        problems.seed_everything(seed)  # the candidate's forward gets the same random state
        with torch.no_grad(), recorder:
            out = self.model(*run_inputs)
        synchronize(self.device)
        sources = {i: IndexSource(**s) for i, s in recorder.sources_for(out).items()}
        del recorder
        for source in sources.values():
            source.values = source.values.to(self.device)
        reference = detached(out, self.owned)
        del out
        after = None if inputs_changed(inputs, run_inputs) is None else run_inputs
        del run_inputs
        expected = ExpectedSet(name, seed, inputs, reference, None, sources, after)
        if with_truth:
            self.add_truth(expected)
        return expected

    def add_truth(self, expected: ExpectedSet) -> None:
        """The set's float64 truth, made where the plan says (a no-op once made, or where there is none)."""
        if expected.truth is not None or self.model64 is None:
            return
        home = self.device if self.truth_place == "device" else "cpu"
        inputs = expected.inputs if expected.inputs is not None else self.make_inputs(expected.name)
        try:
            problems.seed_everything(expected.seed)
            with torch.no_grad():
                full = self.model64(*_float64_copy(inputs, home))
            synchronize(self.device)
            full = detached(full, _storages(list(self.model64.parameters()) + list(self.model64.buffers())))
            reference = _moved(expected.reference, home)
            expected.truth = truths.compact(flatten_outputs(reference), flatten_outputs(full))
            del full, reference
        except Exception as exc:
            self.truth_status = f"unavailable: the float64 reference failed ({type(exc).__name__}: {exc})"
            self.model64 = None
            return
        if not self.resident and self.device.startswith("cuda"):
            torch.cuda.empty_cache()  # the float64 forward's memory, back to the other processes on the GPU

    def keep(self, expected: ExpectedSet) -> None:
        """A set computed while preparing, kept as the tier says."""
        if self.tier == "resident":
            self.sets[expected.name] = expected
        elif self.tier == "host":
            self.on_host[expected.name] = ExpectedSet(
                expected.name, expected.seed, None, _moved(expected.reference, "cpu"),
                _moved(expected.truth, "cpu"),
                {i: IndexSource(s.values.to("cpu"), s.dim, s.keepdim) for i, s in expected.index_sources.items()},
                _moved(expected.inputs_after, "cpu"))

    def get(self, name: str) -> ExpectedSet:
        found = self.sets.get(name)
        if found is not None:
            return found
        if not self.resident:
            self.sets.clear()  # one set at a time: the last one's memory goes before the next is made
            if self.device.startswith("cuda"):
                torch.cuda.empty_cache()  # to the other processes on the GPU, whose plan counts it
        kept = self.on_host.get(name)
        if kept is not None:
            found = ExpectedSet(name, kept.seed, self.make_inputs(name), _moved(kept.reference, self.device),
                                None, {i: IndexSource(s.values.to(self.device), s.dim, s.keepdim)
                                       for i, s in kept.index_sources.items()},
                                _moved(kept.inputs_after, self.device))
        else:  # outside the resident tier (whose sets are all kept) the truth waits for a comparison
            found = self.compute(name, with_truth=self.resident)
        self.sets[name] = found
        return found

    def truth_for(self, expected: ExpectedSet) -> Any:
        """The set's truth, made or brought from the host now if it is not there yet; None where there is
        none (no float64 model, or it failed)."""
        if expected.truth is None and not self.resident:
            kept = self.on_host.get(expected.name)
            if kept is not None and kept.truth is not None:
                expected.truth = kept.truth  # moved to the device by the comparison, a leaf at a time
            else:
                self.add_truth(expected)
        return expected.truth

