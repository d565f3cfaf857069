"""GPU timing, the same for candidates and baselines.

Each trial: flush L2 (write a buffer larger than it), synchronize, start the host clock, record
the start event, run, record the end event, synchronize, stop the host clock. Events on the
current stream miss work put on other streams, so the host time (less the measured cost of an
empty timed region) is taken too, and a trial counts as max(event, host). Trials whose host time
is far above their event time are flagged.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

from kfoundry.types import TimingStats

TIMING_METHOD_VERSION = 3
WARMUP_S = 0.25  # long enough for the GPU to reach its steady clocks before the first timed trial
TIMING_METHOD = (
    "per trial: L2 flush, device sync, CUDA events around one call, device sync; "
    "trial time = max(event time, host time minus empty-region overhead); median over trials"
)
DEFAULT_BUDGET_S = 10.0
MIN_TRIALS = 10
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


class GpuTimer:
    """Holds the flush buffer and the measured overhead of an empty timed region."""

    def __init__(self, device) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device)
        props = torch.cuda.get_device_properties(self.device)
        l2 = int(getattr(props, "L2_cache_size", 0) or (50 << 20))
        self.flush_buffer = torch.empty(max(4 * l2, 256 << 20) // 4, dtype=torch.int32, device=self.device)
        self.host_overhead_ms = self._empty_region_ms()

    def _empty_region_ms(self) -> float:
        torch = self.torch
        samples = []
        for _ in range(30):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(self.device)
            t0 = time.perf_counter()
            start.record()
            end.record()
            torch.cuda.synchronize(self.device)
            samples.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(samples)

    def flush(self) -> None:
        self.flush_buffer.zero_()

    def time(
        self, fn: Callable[[], Any], trials: int = 100, budget_s: float = DEFAULT_BUDGET_S, warmup: int = 3
    ) -> tuple[TimingStats, Any]:
        """Time fn() over up to `trials` trials (fewer if they would exceed budget_s); returns
        the statistics and the output of the last timed run."""
        torch = self.torch
        out = fn()  # the first call may compile or autotune: not part of any estimate
        torch.cuda.synchronize(self.device)
        runs, warm_start = 0, time.perf_counter()
        while runs < warmup or time.perf_counter() - warm_start < WARMUP_S:
            self.flush()
            out = fn()
            torch.cuda.synchronize(self.device)
            runs += 1
            if time.perf_counter() - warm_start > budget_s / 4:
                break  # a very long run: enough warming
        per_run = (time.perf_counter() - warm_start) / runs
        count = trials
        if per_run * trials > budget_s:
            count = max(MIN_TRIALS, int(budget_s / max(per_run, 1e-9)))
        count = min(count, trials)
        times, events, hosts, flagged = [], [], [], 0
        for _ in range(count):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.flush()
            torch.cuda.synchronize(self.device)
            t0 = time.perf_counter()
            start.record()
            out = fn()
            end.record()
            torch.cuda.synchronize(self.device)
            host_ms = (time.perf_counter() - t0) * 1e3 - self.host_overhead_ms
            event_ms = start.elapsed_time(end)
            if host_ms > FLAG_RATIO * event_ms + FLAG_MARGIN_MS:
                flagged += 1
            times.append(max(event_ms, host_ms))
            events.append(event_ms)
            hosts.append(host_ms)
        return summarize(times, flagged, events, hosts), out


def peak_memory(device, fn: Callable[[], Any]) -> int:
    """Peak bytes allocated on the device by torch while fn runs once."""
    import torch

    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    fn()
    torch.cuda.synchronize(device)
    return int(torch.cuda.max_memory_allocated(device) - base)
