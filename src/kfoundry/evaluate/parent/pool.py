"""Several evaluation workers on one machine: one Evaluator per device, each pinned to its device.

Each device's Evaluator computes its own expected outputs and its own baselines on that device, so
a candidate's speedup is always against baselines measured on the GPU that timed it (baselines and
device facts are cached per GPU UUID, see evaluate/reference/baselines.py and evaluate/shared/device_facts.py).
"""

from __future__ import annotations

import queue
import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Self

from kfoundry.errors import EnvironmentFault, UsageError
from kfoundry.evaluate.parent.evaluator import Evaluator, PreparedProblem, Progress
from kfoundry.evaluate.parent.options import EvalOptions
from kfoundry.problem import ProblemSource
from kfoundry.types import Evaluation

DEVICES_HELP = ("use cuda:0,cuda:1 (a list of GPUs), all (every visible GPU), cpu, or cpu:N (N CPU workers; "
                "cpu,cpu also works)")


def _cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _parse_token(token: str, spec: str, cuda_count: int) -> list[str]:
    if token == "cpu":
        return ["cpu"]
    if token.startswith("cpu:"):
        count = token[4:]
        if not count.isdigit() or int(count) < 1:
            raise UsageError(f"--devices {spec}: {token!r} needs a positive number of CPU workers (cpu:2)")
        return ["cpu"] * int(count)
    if token == "cuda" or token.startswith("cuda:") or token.isdigit():
        index = token.rsplit(":", 1)[-1] if token != "cuda" else "0"
        if not index.isdigit():
            raise UsageError(f"--devices {spec}: {token!r} is not a GPU: {DEVICES_HELP}")
        if cuda_count == 0:
            raise UsageError(f"--devices {spec}: no CUDA GPU is available on this machine (use cpu or cpu:N)")
        if int(index) >= cuda_count:
            raise UsageError(f"--devices {spec}: there is no cuda:{index}; this machine has {cuda_count} "
                             f"CUDA device(s), cuda:0 to cuda:{cuda_count - 1}")
        return [f"cuda:{int(index)}"]
    raise UsageError(f"--devices {spec}: unknown device {token!r}: {DEVICES_HELP}")


def parse_devices(spec: str | None) -> list[str]:
    """The devices of a `--devices` spec, one evaluation worker each.

    "cuda:0,cuda:1" (or "0,1") lists GPUs; "all" is every visible GPU; "cpu:N" (or "cpu,cpu,...") is N CPU
    workers; None or "auto" is one worker on the default device (the first GPU, else the CPU). A GPU may be
    listed once (two workers timing on one GPU would disturb each other), and CPU and GPUs do not mix (the
    CPU is not timed, so their fitness would not compare)."""
    text = (spec or "auto").strip().lower()
    if text == "auto":
        return ["cuda:0"] if _cuda_count() else ["cpu"]
    tokens = [t.strip() for t in text.split(",")]
    if any(not t for t in tokens):
        raise UsageError(f"--devices {spec}: an empty entry: {DEVICES_HELP}")
    if "all" in tokens:
        if len(tokens) > 1:
            raise UsageError(f"--devices {spec}: 'all' stands alone")
        count = _cuda_count()
        if count == 0:
            raise UsageError("--devices all: no CUDA GPU is visible on this machine (use cpu or cpu:N)")
        return [f"cuda:{i}" for i in range(count)]
    count = _cuda_count() if any(t != "cpu" and not t.startswith("cpu:") for t in tokens) else 0
    devices = [device for token in tokens for device in _parse_token(token, spec, count)]
    gpus = [d for d in devices if d != "cpu"]
    if gpus and len(gpus) != len(devices):
        raise UsageError(f"--devices {spec}: CPU and GPU workers do not mix (the CPU is not timed)")
    repeated = sorted({d for d in gpus if gpus.count(d) > 1})
    if repeated:
        raise UsageError(f"--devices {spec}: {', '.join(repeated)} listed twice: one worker per GPU, "
                         "so that timings do not disturb each other")
    return devices


def pool_device(devices: list[str]) -> str:
    """One name for a set of devices: "cpu" when all are CPU workers, the GPU when there is one, else "cuda"."""
    if all(d == "cpu" for d in devices):
        return "cpu"
    return devices[0] if len(devices) == 1 else "cuda"


class DeviceSlots:
    """Hands out devices one at a time: with `lease()`, different jobs (bench: different problems) run on
    different devices at once, each alone on its device."""

    def __init__(self, devices: list[str]) -> None:
        self.devices = list(devices)
        self._free: queue.SimpleQueue[str] = queue.SimpleQueue()
        for device in self.devices:
            self._free.put(device)

    @contextmanager
    def lease(self) -> Iterator[str]:
        device = self._free.get()
        try:
            yield device
        finally:
            self._free.put(device)


class EvaluatorPool:
    """The surface of an Evaluator over several devices: `evaluate` may be called from several threads at
    once and runs each candidate on whichever device is free (blocking until one is)."""

    def __init__(self, problem: str | Path, options: EvalOptions | None = None,
                 devices: list[str] | str | None = None, progress: Progress | None = None) -> None:
        self.devices = list(devices) if isinstance(devices, list) else parse_devices(devices)
        if not self.devices:
            raise UsageError("an evaluator pool needs at least one device")
        base = options or EvalOptions()
        # one seed for all: every device judges with the same inputs, so verdicts do not depend on the device
        seed = base.seed if base.seed is not None else secrets.randbits(31)
        self.options = replace(base, device=self.devices[0], seed=seed)
        self.device = pool_device(self.devices)
        self.evaluators: list[Evaluator] = []
        try:
            for index, device in enumerate(self.devices):
                tag = f"[{device}#{index}] " if len(self.devices) > 1 else ""
                self.evaluators.append(Evaluator(problem, replace(base, device=device, seed=seed),
                                                 _tagged(progress, tag)))
        except BaseException:
            self.close()
            raise
        self.source: ProblemSource = self.evaluators[0].source
        self._free: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._filled = False

    @property
    def prepared(self) -> PreparedProblem | None:
        return self.evaluators[0].prepared

    @property
    def slots(self) -> int:
        """Candidates evaluated at once over all devices (each device's evaluator sizes its own)."""
        return sum(e.slots for e in self.evaluators)

    def prepare(self) -> PreparedProblem:
        """The reference on every device at once; the first device's PreparedProblem (each evaluator keeps
        its own for its candidates)."""
        if len(self.evaluators) == 1:
            prepared = self.evaluators[0].prepare()
        else:
            with ThreadPoolExecutor(len(self.evaluators), thread_name_prefix="kfoundry-prepare") as executor:
                futures = [executor.submit(e.prepare) for e in self.evaluators]
            errors = [f.exception() for f in futures if f.exception() is not None]
            if errors:
                raise errors[0]
            prepared = futures[0].result()
        if not self._filled:  # one entry per slot: a device takes as many candidates as it has workers
            self._filled = True
            for index, evaluator in enumerate(self.evaluators):
                for _ in range(evaluator.slots):
                    self._free.put(index)
        return prepared

    def evaluate(self, candidate: str | Path) -> Evaluation:
        self.prepare()
        index = self._free.get()
        try:
            evaluation = self.evaluators[index].evaluate(candidate)
        except EnvironmentFault as fault:
            for evaluator in self.evaluators:  # the other devices' evaluations end too: the run stops
                evaluator.stop(fault)
            raise
        finally:
            self._free.put(index)
        evaluation.settings["worker"] = {"index": index, "device": self.devices[index]}
        return evaluation

    def complete(self, evaluation: Evaluation) -> bool:
        """The baselines a verdict was given without, from the device that gave it (Evaluator.complete)."""
        index = (evaluation.settings.get("worker") or {}).get("index")
        return index is not None and self.evaluators[index].complete(evaluation)

    def time_baselines(self, names: list[str]) -> bool:
        """Every device's record gets the baselines (Evaluator.time_baselines); True where any was measured."""
        return any([evaluator.time_baselines(names) for evaluator in self.evaluators])

    def attach_baselines(self, evaluation: Evaluation) -> bool:
        index = (evaluation.settings.get("worker") or {}).get("index")
        return index is not None and self.evaluators[index].attach_baselines(evaluation)

    def close(self) -> None:
        for evaluator in self.evaluators:
            evaluator.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _tagged(progress: Progress | None, tag: str) -> Progress | None:
    if progress is None or not tag:
        return progress
    return lambda message: progress(tag + message)


__all__ = ["DeviceSlots", "EvaluatorPool", "parse_devices", "pool_device"]
