"""GPU timing, the same for candidates and baselines.

Each trial: flush L2 (write a buffer larger than it), synchronize, start the host clock, give the
GPU a short spin (the lead) while the host launches the call, record the start event, run, record
the end event, synchronize, stop the host clock. Without the lead the GPU sits idle from the start
event until the host has gone through the launch path (Python, Triton's launcher), and that host
time, which differs from one process to the next, was counted as kernel time (seen on the H200:
kernel durations 0.7% apart over 5 processes, event medians 21% apart). Events on the
current stream miss work put on other streams, so the host time (less the measured cost of an
empty timed region) is taken too, and a trial counts as max(event, host). Trials whose host time
is far above their event time are flagged.

The lead fits the call: the warm-up measures how long the host takes to queue it (from the lead's
launch until the call returns), and the lead is made longer than that (up to LEAD_CAP_MS). A
trial then counts the larger of the event time (the GPU's work back to back) and that queueing
time (a call whose host work outlasts its GPU work is bound by the host in a loop). Why: with a
fixed 0.2 ms lead, a GEMM candidate whose host path (operand splits, five launches) took 0.45-0.7
ms timed 12-17% above its kernels' sum inside a search on an H100 and 2% above alone; the GPU
waited for the host inside the events, and the host's speed differs from one moment to the next.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Iterator, MutableMapping
from typing import Any, Callable

import torch

from kfoundry.types import TimingStats

# Taken when this module is imported, before any candidate's code runs in the worker: a candidate
# that replaces these (the guard reports it) cannot bend the timer.
_perf_counter = time.perf_counter
_Event = torch.cuda.Event
_record = torch.cuda.Event.record
_elapsed_time = torch.cuda.Event.elapsed_time
_synchronize = torch.cuda.synchronize
_sleep = getattr(torch.cuda, "_sleep", None)  # a GPU spin of N clock cycles



@contextlib.contextmanager
def spent(seconds: MutableMapping[str, float], name: str) -> Iterator[None]:
    """Add the block's wall time to seconds[name]: where a process's time goes, for the throughput benchmark."""
    started = _perf_counter()
    try:
        yield
    finally:
        seconds[name] = seconds.get(name, 0.0) + _perf_counter() - started


TIMING_METHOD_VERSION = 9
LEAD_MS = 0.2  # the GPU's shortest spin before the start event: longer than launching a few kernels takes
LEAD_MARGIN = 1.5  # the lead: this many times the warm-up's 90th percentile of the host's queueing time ...
LEAD_CAP_MS = 10.0  # ... and no longer than this (a host-bound call counts its queueing time anyway)
WARMUP_S = 0.1  # at least this much warm-up, so the GPU leaves its idle clocks
STABLE_BATCH = 10  # then warm-up batches of this many trials ...
STABLE_TOLERANCE = 0.02  # ... until two in a row have medians this close
STABLE_LIMIT_S = 2.0  # ... or this much time has passed
TIMING_METHOD = (
    "per trial: L2 flush, device sync, a GPU spin while the host launches (0.2 ms, or 1.5x the host's time to "
    "queue the call in the warm-up, up to 10 ms), CUDA events around one call, device sync; "
    "trial time = the larger of the event time and the host's time to queue the call, or host time minus "
    "empty-region overhead where that is far longer (work the events missed); median over trials"
)
DEFAULT_BUDGET_S = 10.0
MIN_TRIALS = 10
RELATIVE_BUDGET = 2.0  # a candidate's timed trials take at most this many times what eager's take ...
MIN_RELATIVE_BUDGET_S = 1.0  # ... or this long, whichever is more
FLAG_RATIO = 1.5
FLAG_MARGIN_MS = 0.02


def quantile(sorted_values: list[float], q: float) -> float:
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(times_ms: list[float], flagged: int = 0, event_ms: list[float] | None = None,
              host_ms: list[float] | None = None) -> TimingStats:
    values = sorted(times_ms)
    return TimingStats(
        median_ms=statistics.median(values),
        q1_ms=quantile(values, 0.25),
        q3_ms=quantile(values, 0.75),
        min_ms=values[0],
        max_ms=values[-1],
        trials=len(values),
        host_flagged_trials=flagged,
        event_median_ms=statistics.median(event_ms) if event_ms else None,
        host_median_ms=statistics.median(host_ms) if host_ms else None,
    )


def flush_page_cache() -> None:
    """Write out dirty file pages now (the evaluation just saved hundreds of MB of tensors), so the
    kernel's background write-back does not run while trials are timed."""
    try:
        os.sync()
    except (AttributeError, OSError):
        pass


class GpuTimer:
    """Holds the flush buffer, the lead's length in clock cycles and the measured overhead of an
    empty timed region."""

    lead_cycles = 0  # 0: no lead (no torch.cuda._sleep)
    cycles_per_ms = 0.0  # the spin's clock cycles a millisecond, as calibrated
    lead_ms = 0.0

    def __init__(self, device) -> None:
        self.device = torch.device(device)
        props = torch.cuda.get_device_properties(self.device)
        l2 = int(getattr(props, "L2_cache_size", 0) or (50 << 20))
        self.flush_buffer = torch.empty(max(4 * l2, 256 << 20) // 4, dtype=torch.int32, device=self.device)
        self.cycles_per_ms = self._calibrate_spin()
        self.set_lead(LEAD_MS)

    def _calibrate_spin(self) -> float:
        """Clock cycles a millisecond of the spin, from a timed spin of a million cycles (the second of two)."""
        if _sleep is None:
            return 0.0
        cycles, ms = 1_000_000, 0.0
        try:
            for _ in range(2):
                start, end = self._event(), self._event()
                self._sync()
                self._record(start)
                _sleep(cycles)
                self._record(end)
                self._sync()
                ms = self._elapsed_time(start, end)
        except RuntimeError:  # a build without the spin kernel: trials without a lead
            return 0.0
        return cycles / ms if ms > 0 else 0.0

    def set_lead(self, ms: float) -> None:
        """A lead of `ms` (none where there is no spin), and the cost of an empty timed region with it."""
        self.lead_cycles = max(1, int(self.cycles_per_ms * ms)) if self.cycles_per_ms else 0
        self.lead_ms = ms if self.lead_cycles else 0.0
        self.host_overhead_ms = self._empty_region_ms()

    def fit_lead(self, enqueue_ms: list[float]) -> None:
        """The lead for a call whose host took `enqueue_ms` to queue it in the warm-up: LEAD_MARGIN times their
        90th percentile, at least LEAD_MS and at most LEAD_CAP_MS."""
        if not enqueue_ms or not self.cycles_per_ms:
            return
        wanted = min(LEAD_CAP_MS, max(LEAD_MS, LEAD_MARGIN * quantile(sorted(enqueue_ms), 0.9)))
        if abs(wanted - self.lead_ms) > 0.01:
            self.set_lead(wanted)

    def _lead(self) -> None:
        if self.lead_cycles:
            _sleep(self.lead_cycles)

    def _empty_region_ms(self) -> float:
        samples = []
        for _ in range(30):
            start, end = self._event(), self._event()
            self._sync()
            t0 = _perf_counter()
            self._lead()
            self._record(start)
            self._record(end)
            self._sync()
            samples.append((_perf_counter() - t0) * 1e3)
        return statistics.median(samples)

    def flush(self) -> None:
        self.flush_buffer.zero_()

    last_enqueue_ms = 0.0  # the last trial's host time until the call returned (see trial)

    def trial(self, fn: Callable[[], Any]) -> tuple[float, float, Any]:
        """One timed run: (event ms, host ms less the empty-region overhead, output). It also keeps the host's time
        from the lead's launch until the call returned, its work queued (`last_enqueue_ms`): where that is longer
        than the lead, the GPU waited for the host inside the events, and a slower host gives a longer time."""
        start, end = self._event(), self._event()
        self.flush()
        self._sync()
        t0 = _perf_counter()
        self._lead()
        self._record(start)
        out = fn()
        self.last_enqueue_ms = (_perf_counter() - t0) * 1e3
        self._record(end)
        self._sync()
        host_ms = (_perf_counter() - t0) * 1e3 - self.host_overhead_ms
        return self._elapsed_time(start, end), host_ms, out

    # the primitives, as taken at import (tests replace them on an instance)
    def _event(self):
        return _Event(enable_timing=True)

    def _sync(self) -> None:
        _synchronize(self.device)

    _record = staticmethod(_record)
    _elapsed_time = staticmethod(_elapsed_time)

    def warm_up(self, fn: Callable[[], Any], budget_s: float) -> tuple[int, float]:
        """Run timed-like trials for at least WARMUP_S, then in batches until two batches in a
        row agree within STABLE_TOLERANCE (clocks settled), for at most a quarter of the budget.
        The last batch's queueing times are kept (`warm_enqueue_ms`). Returns (runs, seconds)."""
        started = _perf_counter()
        self.trial(fn)
        one = _perf_counter() - started
        limit = min(STABLE_LIMIT_S, budget_s / 4)
        size = max(1, min(STABLE_BATCH, int(limit / 4 / max(one, 1e-9))))  # long runs: smaller batches
        runs, previous = 1, None
        while True:
            batch, self.warm_enqueue_ms = [], []
            for _ in range(size):
                batch.append(self.trial(fn)[0])
                self.warm_enqueue_ms.append(self.last_enqueue_ms)
            runs += size
            elapsed = _perf_counter() - started
            current = statistics.median(batch)
            settled = previous is not None and abs(current - previous) <= STABLE_TOLERANCE * previous
            if elapsed >= limit or (elapsed >= WARMUP_S and settled):
                return runs, elapsed
            previous = current

    def clock_mhz(self) -> int | None:
        try:
            return int(torch.cuda.clock_rate(self.device))
        except Exception:  # needs NVML (pynvml); a diagnostic only
            return None

    def time(
        self, fn: Callable[[], Any], trials: int = 100, budget_s: float = DEFAULT_BUDGET_S,
        flush_files: bool = True, trials_budget_s: float | None = None,
    ) -> tuple[TimingStats, Any]:
        """Time fn() over up to `trials` trials (fewer if they would exceed budget_s, or trials_budget_s,
        which bounds the trials but not the warm-up); returns the statistics and the output of the last
        timed run. flush_files=False: the caller wrote out dirty pages already (before taking the GPU to
        itself: a sync can take a while)."""
        out = fn()  # the first call may compile or autotune: not part of any estimate
        self._sync()
        if flush_files:
            flush_page_cache()
        warm_runs, warm_s = self.warm_up(fn, budget_s)
        before = self.lead_ms
        self.fit_lead(self.warm_enqueue_ms)
        per_run = warm_s / warm_runs + max(0.0, self.lead_ms - before) / 1e3
        count = trials
        limit = min(budget_s, trials_budget_s) if trials_budget_s else budget_s
        if per_run * trials > limit:
            count = max(MIN_TRIALS, int(limit / max(per_run, 1e-9)))
        count = min(count, trials)
        clock_start = self.clock_mhz()
        times, events, hosts, enqueues, flagged = [], [], [], [], 0
        for _ in range(count):
            event_ms, host_ms, out = self.trial(fn)
            enqueues.append(self.last_enqueue_ms)
            # The host's whole time (to the sync) only overrides the events where it saw far more (work
            # the events on this stream missed): a plain max() with it would let host jitter of a few tens
            # of µs decide launch-bound medians. The queueing time counts where it outlasts the GPU's
            # work: such a call is bound by its host.
            hidden = host_ms > FLAG_RATIO * event_ms + FLAG_MARGIN_MS
            flagged += hidden
            times.append(host_ms if hidden else max(event_ms, self.last_enqueue_ms))
            events.append(event_ms)
            hosts.append(host_ms)
        stats = summarize(times, flagged, events, hosts)
        stats.enqueue_median_ms = statistics.median(enqueues) if enqueues else None
        stats.lead_ms = round(self.lead_ms, 4)
        stats.warmup_runs, stats.warmup_s = warm_runs, round(warm_s, 4)
        stats.sm_clock_mhz = [clock_start, self.clock_mhz()]
        return stats, out


def trials_budget_s(eager_median_ms: float | None, trials: int) -> float | None:
    """How long a candidate's timed trials may take once eager's median is known: RELATIVE_BUDGET times
    what `trials` runs of eager take, and at least MIN_RELATIVE_BUDGET_S. While a candidate is timed the
    GPU is no one else's, and a candidate ten times slower than eager (a tuner child with a bad tile)
    held it for 8 s of 100 trials; a median of 20 says as much. A candidate up to twice eager's time
    still gets every trial. None (no bound beyond the budget) before eager is measured."""
    if not eager_median_ms:
        return None
    return max(MIN_RELATIVE_BUDGET_S, RELATIVE_BUDGET * eager_median_ms * trials / 1e3)


def peak_memory(device, fn: Callable[[], Any]) -> int:
    """Peak bytes allocated on the device by torch while fn runs once."""
    import torch

    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    fn()
    torch.cuda.synchronize(device)
    return int(torch.cuda.max_memory_allocated(device) - base)
