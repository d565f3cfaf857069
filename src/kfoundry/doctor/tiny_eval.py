"""One tiny evaluation end to end (kfoundry's bundled problem and its Triton candidate), as `kfoundry eval`
runs it: the judge, a sandboxed candidate worker, the guard, and on a GPU the timing against eager."""

from __future__ import annotations

import time
from pathlib import Path

from kfoundry.doctor.check import Check, passed, problem
from kfoundry.errors import EnvironmentFault, KFoundryError

# the experience library's bundled seed (installed with the package), at a size that evaluates in seconds on a CPU
BUNDLED = Path(__file__).resolve().parent.parent / "library" / "seed" / "pointwise_chain"
PROBLEM, CANDIDATE = BUNDLED / "problem.py", BUNDLED / "kernel.py"
SIZES = {"batch_size": 4, "dim": 1024}
SET_FLAGS = " ".join(f"--set {name}={value}" for name, value in SIZES.items())


def check_eval(device: str = "cpu", timeout_s: float = 180.0) -> Check:
    from kfoundry.evaluate import EvalOptions, evaluate

    gpu = device.startswith("cuda")
    options = EvalOptions(device=device, trials=2, seed=0, timeout_s=timeout_s, reference_timeout_s=timeout_s,
                          timing_trials=10, baselines=("eager",) if gpu else (), no_cache=True, set_values=SIZES)
    started = time.monotonic()
    try:
        evaluation = evaluate(PROBLEM, CANDIDATE, options)
    except EnvironmentFault as fault:
        return problem("eval", fault.cause, fault.fix, fatal=True)
    except KFoundryError as exc:
        return problem("eval", f"the bundled problem could not be evaluated: {exc}",
                       f"evaluate it by hand to see every phase: kfoundry eval {PROBLEM} {CANDIDATE} {SET_FLAGS} --device {device}",
                       fatal=True)
    seconds = time.monotonic() - started
    if not evaluation.ok:
        return problem("eval", f"the bundled candidate, which is correct, was judged {evaluation.status}: "
                               f"{evaluation.message}",
                       f"evaluate it by hand to see every phase: kfoundry eval {PROBLEM} {CANDIDATE} {SET_FLAGS} --device {device}",
                       fatal=True)
    timing = evaluation.timing
    measured = (f"; {timing.runtime_ms:.3g} ms, {timing.speedup_eager:.2f}x vs eager"
                if timing.runtime_ms is not None and timing.speedup_eager is not None else "; not timed on the CPU")
    return passed("eval", f"the bundled problem and candidate: ok on {device} in {seconds:.1f} s{measured}")
