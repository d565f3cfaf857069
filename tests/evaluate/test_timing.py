"""kfoundry.evaluate.timing: statistics on CPU; timing an example on a CUDA GPU (gpu marker)."""

import pytest

from kfoundry.evaluate.timing import quantile, summarize


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

    from kfoundry.evaluate.timing import GpuTimer, peak_memory

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
