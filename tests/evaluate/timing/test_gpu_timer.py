"""kfoundry.evaluate.timing.gpu_timer: statistics on CPU; timing an example on a CUDA GPU (gpu marker)."""

import pytest

from kfoundry.evaluate.timing.gpu_timer import WARMUP_S, quantile, summarize


def test_quantile_interpolates_linearly():
    values = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert quantile(values, 0.0) == 1.0
    assert quantile(values, 0.5) == 3.0
    assert quantile(values, 1.0) == 5.0
    assert quantile(values, 0.25) == 2.0
    assert quantile([1.0, 2.0], 0.25) == pytest.approx(1.25)
    assert quantile([7.0], 0.75) == 7.0


def test_summarize_sorts_and_reports_median_and_quartiles():
    stats = summarize([5.0, 1.0, 4.0, 2.0, 3.0, 100.0], flagged=2)
    assert stats.trials == 6
    assert stats.median_ms == pytest.approx(3.5)
    assert stats.min_ms == 1.0 and stats.max_ms == 100.0
    assert stats.q1_ms == pytest.approx(2.25)
    assert stats.q3_ms == pytest.approx(4.75)
    assert stats.host_flagged_trials == 2


def test_summarize_one_trial():
    stats = summarize([0.5])
    assert (stats.median_ms, stats.q1_ms, stats.q3_ms, stats.min_ms, stats.max_ms) == (0.5,) * 5
    assert stats.trials == 1 and stats.host_flagged_trials == 0


@pytest.mark.gpu
def test_gpu_timer_times_a_matmul():
    import torch

    from kfoundry.evaluate.timing.gpu_timer import GpuTimer, peak_memory

    a = torch.randn(1024, 1024, device="cuda")
    timer = GpuTimer("cuda")
    stats, out = timer.time(lambda: a @ a, trials=20, budget_s=5.0)
    assert stats.trials == 20
    assert 0 < stats.min_ms <= stats.median_ms <= stats.max_ms
    assert out.shape == (1024, 1024)
    assert peak_memory("cuda", lambda: a @ a) >= 1024 * 1024 * 4


@pytest.mark.gpu
def test_example_is_timed_on_cuda(examples_dir):
    import kfoundry

    evaluation = kfoundry.evaluate(
        examples_dir / "pointwise_chain" / "problem.py", examples_dir / "pointwise_chain" / "kernel.py",
        device="cuda", trials=2, timing_trials=20, baselines=("eager",), no_cache=True, measure_device=False,
        set_values={"batch_size": 256, "dim": 4096},
    )
    assert evaluation.status == "ok", evaluation.message
    timing = evaluation.timing
    assert timing.runtime_ms is not None and timing.runtime_ms > 0
    assert timing.candidate.trials == timing.trials <= 20
    assert timing.eager_ms is not None and timing.speedup_eager == pytest.approx(timing.eager_ms / timing.runtime_ms)
    assert timing.compile_ms is None  # only eager was asked for
    assert timing.device and timing.device == evaluation.device_facts.name
    assert " ms median over " in evaluation.message and "vs eager" in evaluation.message


def _fake_timer(event_ms):
    """A GpuTimer whose primitives are stand-ins, so its logic (warm-up, trial count, flags) runs
    on CPU: every event pair reports `event_ms`, while fn() really takes its host time."""
    from kfoundry.evaluate.timing.gpu_timer import GpuTimer

    timer = GpuTimer.__new__(GpuTimer)
    timer.device, timer.host_overhead_ms = "cuda:0", 0.0
    timer.flush = lambda: None
    timer._event = lambda: object()
    timer._sync = lambda: None
    timer._record = lambda event: None
    timer._elapsed_time = lambda start, end: event_ms
    timer.clock_mhz = lambda: 1980
    return timer


def test_timer_logic_counts_trials_and_takes_the_event_time_when_host_agrees():
    timer = _fake_timer(event_ms=5.0)  # fn takes ~0 ms of host time: events decide
    calls = []
    stats, out = timer.time(lambda: calls.append(1) or len(calls), trials=25, budget_s=1.0)
    assert stats.trials == 25 and stats.median_ms == 5.0 and stats.host_flagged_trials == 0
    assert stats.warmup_runs >= 10 and stats.warmup_s >= WARMUP_S  # warm-up ran before the trials
    assert out == len(calls)  # the output of the last timed run comes back
    assert stats.sm_clock_mhz == [1980, 1980]


def test_timer_logic_flags_work_the_events_do_not_see():
    import time

    timer = _fake_timer(event_ms=0.001)  # events see nothing (work on another stream) ...
    stats, _ = timer.time(lambda: time.sleep(0.002), trials=12, budget_s=1.0)  # ... the host sees 2 ms
    assert stats.host_flagged_trials == stats.trials == 12
    assert stats.median_ms >= 2.0  # host time is used
    assert stats.event_median_ms == 0.001


def test_timer_takes_fewer_trials_when_runs_are_long():
    import time

    timer = _fake_timer(event_ms=0.0)
    stats, _ = timer.time(lambda: time.sleep(0.02), trials=100, budget_s=0.4)
    assert 10 <= stats.trials < 100  # 100 x 20 ms would exceed the 0.4 s budget; at least 10 are kept


def test_a_trials_budget_bounds_the_trials_but_not_the_warm_up():
    import time

    timer = _fake_timer(event_ms=0.0)
    stats, _ = timer.time(lambda: time.sleep(0.01), trials=100, budget_s=10.0, trials_budget_s=0.3)
    assert 10 <= stats.trials <= 40  # 0.3 s of 10 ms runs, not 100 of them
    assert stats.warmup_s >= WARMUP_S  # the warm-up had the whole budget's limit


def test_a_candidates_trials_budget_follows_eager():
    from kfoundry.evaluate.timing.gpu_timer import MIN_RELATIVE_BUDGET_S, RELATIVE_BUDGET, trials_budget_s

    assert trials_budget_s(None, 100) is None  # eager not measured yet: only the budget bounds it
    assert trials_budget_s(7.0, 100) == pytest.approx(RELATIVE_BUDGET * 0.7)  # 100 trials of eager: 0.7 s
    assert trials_budget_s(0.05, 100) == MIN_RELATIVE_BUDGET_S  # a fast problem: the floor


def test_timer_keeps_the_event_time_when_the_host_sees_only_a_little_more(monkeypatch):
    from kfoundry.evaluate.timing import gpu_timer

    now = [0.0]  # the host's clock, advanced by the call alone: a loaded test machine cannot stretch it
    monkeypatch.setattr(gpu_timer, "_perf_counter", lambda: now[0])
    timer = _fake_timer(event_ms=20.0)

    def call():
        now[0] += 0.001  # 1 ms to queue the call

    def sync():
        now[0] += 0.020  # the GPU's work

    timer._sync = sync
    # host 21 ms: jitter, not hidden work (the flag needs 1.5x the event time)
    stats, _ = timer.time(call, trials=10, budget_s=2.0)
    assert stats.host_flagged_trials == 0
    assert stats.median_ms == 20.0 and stats.host_median_ms == pytest.approx(21.0)


def test_the_hosts_time_to_queue_the_call_is_kept_apart_from_the_sync(monkeypatch):
    """enqueue: from the lead's launch until the call returned, not until the GPU finished (the sync after the end
    event): 0.3 ms to queue a call whose events say 1 ms."""
    from kfoundry.evaluate.timing import gpu_timer

    now = [0.0]
    monkeypatch.setattr(gpu_timer, "_perf_counter", lambda: now[0])
    timer = _fake_timer(event_ms=1.0)

    def sync():
        now[0] += 0.005  # a sync waits for the GPU: in no enqueue time

    def call():
        now[0] += 0.0003

    timer._sync = sync
    stats, _ = timer.time(call, trials=10, budget_s=2.0)
    assert stats.enqueue_median_ms == pytest.approx(0.3)
    assert timer.last_enqueue_ms == pytest.approx(0.3)


def test_a_call_whose_host_outlasts_its_gpu_work_counts_the_hosts_time(monkeypatch):
    """3 ms to queue work the GPU does in 1 ms: in a loop the host sets the pace, so a trial counts 3 ms."""
    from kfoundry.evaluate.timing import gpu_timer

    now = [0.0]
    monkeypatch.setattr(gpu_timer, "_perf_counter", lambda: now[0])
    timer = _fake_timer(event_ms=1.0)
    stats, _ = timer.time(lambda: now.__setitem__(0, now[0] + 0.003), trials=10, budget_s=2.0)
    assert stats.median_ms == pytest.approx(3.0) and stats.event_median_ms == 1.0
    assert stats.host_flagged_trials == 10  # host 3 ms against 1 ms of events: flagged as before


def test_the_lead_is_fitted_to_the_hosts_time_to_queue_the_call(monkeypatch):
    """1.5x the 90th percentile of the warm-up's queueing times, at least LEAD_MS, at most LEAD_CAP_MS; the cost of
    an empty timed region is measured again with the new lead."""
    from kfoundry.evaluate.timing import gpu_timer

    spins = []
    monkeypatch.setattr(gpu_timer, "_sleep", spins.append)
    timer = _fake_timer(event_ms=1.0)
    timer.cycles_per_ms = 1000.0
    timer.set_lead(gpu_timer.LEAD_MS)
    assert timer.lead_cycles == 200 and timer.lead_ms == gpu_timer.LEAD_MS
    timer.fit_lead([0.1] * 9 + [0.6])  # the 90th percentile: 0.15 ms (one slow trial of ten weighs a tenth)
    assert timer.lead_ms == pytest.approx(0.225)
    timer.fit_lead([0.4] * 10)
    assert timer.lead_ms == pytest.approx(0.6) and timer.lead_cycles == 600 and spins[-1] == 600
    timer.fit_lead([50.0] * 10)
    assert timer.lead_ms == gpu_timer.LEAD_CAP_MS
    timer.fit_lead([0.01] * 10)
    assert timer.lead_ms == gpu_timer.LEAD_MS


def test_each_trial_gives_the_gpu_a_lead_before_the_start_event(monkeypatch):
    """The GPU spins for the lead while the host launches the call, so the start event does not wait
    for the host's launch path (different in every process) and the call's kernels run back to back."""
    from kfoundry.evaluate.timing import gpu_timer

    order = []
    monkeypatch.setattr(gpu_timer, "_sleep", lambda cycles: order.append(("spin", cycles)))
    timer = _fake_timer(event_ms=1.0)
    timer.lead_cycles = 4000
    timer._record = lambda event: order.append(("record", event))
    start_event, end_event = object(), object()
    events = iter([start_event, end_event])
    timer._event = lambda: next(events)
    event_ms, _, out = timer.trial(lambda: order.append(("call", None)) or 7)
    assert out == 7 and event_ms == 1.0
    assert order == [("spin", 4000), ("record", start_event), ("call", None), ("record", end_event)]


def test_no_lead_without_a_spin_primitive():
    timer = _fake_timer(event_ms=1.0)
    assert timer.lead_cycles == 0  # the class default, also where torch.cuda._sleep does not exist
    timer._lead()  # does nothing


def test_a_spin_that_fails_leaves_trials_without_a_lead(monkeypatch):
    from kfoundry.evaluate.timing import gpu_timer

    def broken(cycles):
        raise RuntimeError("no kernel image is available")

    monkeypatch.setattr(gpu_timer, "_sleep", broken)
    timer = _fake_timer(event_ms=1.0)
    assert timer._calibrate_spin() == 0
    monkeypatch.setattr(gpu_timer, "_sleep", lambda cycles: None)
    assert timer._calibrate_spin() == 1_000_000  # 1e6 cycles took 1.0 ms


def test_spent_adds_a_blocks_wall_time_to_a_counter_or_a_dict():
    import time
    from collections import Counter

    from kfoundry.evaluate.timing.gpu_timer import spent

    for seconds in (Counter(), {}):
        with spent(seconds, "wait"):
            time.sleep(0.01)
        try:
            with spent(seconds, "wait"):
                raise ValueError("counted all the same")
        except ValueError:
            pass
        assert set(seconds) == {"wait"} and seconds["wait"] >= 0.01
