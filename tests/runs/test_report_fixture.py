"""A run store for the report tests: a made-up optimize run of examples/linear_epilogue on an H200.

FIXTURE DATA: every runtime, speedup, token count and cost below is invented to exercise the
report's rendering; none of it was measured. The evaluation records are real Evaluation objects
(kfoundry.types) with the real diagnosis (kfoundry.diagnose) computed from the invented timings, so
the report reads the same shapes of data a real run writes."""

from __future__ import annotations

import re
from pathlib import Path

from kfoundry.diagnose import diagnose
from kfoundry.runs import RunStore
from kfoundry.runs.outputs import write_outputs
from kfoundry.types import CorrectnessReport, DeviceFacts, Evaluation, ProblemCost, TimingReport, TimingStats

REPO = Path(__file__).resolve().parents[2]
PROBLEM = REPO / "examples" / "linear_epilogue" / "problem.py"
BEST_SOURCE = (REPO / "examples" / "linear_epilogue" / "kernel.py").read_text()
FIXTURE_LABEL = "fixture: invented numbers (report rendering test)"

H200 = DeviceFacts(kind="cuda", name="NVIDIA H200", uuid="GPU-fixture", sm_count=132, l2_bytes=60 * 2**20,
                   shared_memory_per_block_bytes=232448, shared_memory_per_sm_bytes=233472,
                   memory_bytes=141 * 2**30, peak_bandwidth_gbs=4800.0,
                   peak_tflops={"fp32": 67.0, "tf32": 495.0, "fp16": 990.0, "bf16": 990.0},
                   source="datasheet (fixture)")
M, K, N = 8192, 4096, 4096
COST = ProblemCost(flops=2 * M * N * K, input_bytes=M * K * 4, output_bytes=M * N * 4,
                   parameter_bytes=(N * K + N) * 4)
EAGER_MS, COMPILE_MS = 9.0, 8.6


def variant(blocks: tuple[int, int, int], warps: int = 8, stages: int = 3) -> str:
    """The example kernel with other tile sizes: the earlier candidates of the made-up run."""
    source = BEST_SOURCE.replace("BM, BN, BK = 128, 128, 32", "BM, BN, BK = {}, {}, {}".format(*blocks))
    return re.sub(r"num_warps=8, num_stages=3", f"num_warps={warps}, num_stages={stages}", source)


def _stats(ms: float) -> TimingStats:
    return TimingStats(median_ms=ms, q1_ms=ms * 0.99, q3_ms=ms * 1.01, min_ms=ms * 0.97, max_ms=ms * 1.08,
                       trials=100, event_median_ms=ms, host_median_ms=ms * 1.002)


def evaluation(status: str, runtime_ms: float | None = None, message: str = "") -> Evaluation:
    timing = TimingReport(device=H200.name, device_uuid=H200.uuid, torch_version="2.11.0+cu130",
                          triton_version="3.6.0", method="CUDA events and host clock per trial, L2 flushed")
    if runtime_ms is not None:
        timing.runtime_ms, timing.trials = runtime_ms, 100
        timing.candidate = _stats(runtime_ms)
        timing.baselines = {"eager": _stats(EAGER_MS), "compile": _stats(COMPILE_MS)}
        timing.eager_ms, timing.compile_ms = EAGER_MS, COMPILE_MS
        timing.speedup_eager, timing.speedup_compile = EAGER_MS / runtime_ms, COMPILE_MS / runtime_ms
    else:
        timing.reason = "not reached: the candidate failed"
    ok = status == "ok"
    return Evaluation(
        status=status, message=message or (f"correct on 5 trials; {runtime_ms} ms ({FIXTURE_LABEL})" if ok
                                           else f"{status} ({FIXTURE_LABEL})"),
        phase="timing" if ok else "correctness", device="cuda:0", problem=str(PROBLEM),
        correctness=CorrectnessReport(trials=5, trials_passed=5 if ok else 2, seeds=[1, 2, 3, 4, 5], tolerance=1e-4,
                                      precision="fp32", max_abs_error=2e-6 if ok else 0.3, ground_truth="float64"),
        timing=timing, cost=COST, device_facts=H200, guard={"kernel_names": ["_linear_silu_scale_kernel"]},
        settings={"precision": "fp32", "trials": 5, "tolerance": 1e-4, "seed": 11, "policy": "strict",
                  "timing_trials": 100, "torch": "2.11.0+cu130", "triton": "3.6.0"})


# (key, parent key, expert, island, generation, origin, status, runtime ms, source)
STEPS = [
    ("a", None, "initializer", 0, 0, "llm", "ok", 14.0, variant((64, 64, 32), 4, 2)),
    ("b", None, "initializer", 1, 0, "llm", "compile_error", None, variant((64, 128, 16), 4, 2)),
    ("c", "b", "repair", 1, 1, "llm", "ok", 16.0, variant((64, 128, 32), 4, 2)),
    ("d", "a", "compute", 0, 1, "llm", "wrong_output", None, variant((128, 64, 32), 4, 2)),
    ("e", "a", "compute", 0, 2, "llm", "ok", 7.9, variant((128, 128, 32), 4, 2)),
    ("f", "c", "memory", 1, 2, "llm", "ok", 11.5, variant((128, 64, 64), 4, 3)),
    ("g", "e", "tuner", 0, 3, "tuner", "ok", 6.1, variant((128, 128, 32), 8, 2)),
    ("h", "f", "fusion", 1, 3, "llm", "runtime_error", None, variant((256, 64, 64), 8, 3)),
    ("i", "g", "tuner", 0, 4, "tuner", "ok", 5.2, BEST_SOURCE),
    ("j", "g", "algorithm", 0, 4, "llm", "timeout", None, variant((256, 256, 32), 8, 4)),
    ("k", "i", "migrant", 1, 4, "migrant", "ok", 5.2, BEST_SOURCE + "\n# migrated copy\n"),
    ("l", "f", "compute", 1, 5, "llm", "ok", 9.0, variant((128, 128, 64), 4, 3)),
]


def build_run(run_dir: Path) -> dict[str, int]:
    """Write the made-up run into `run_dir`; returns candidate ids by step key."""
    ids: dict[str, int] = {}
    with RunStore.create(run_dir, PROBLEM, {"islands": 2, "llm": ["openai:fixture-model"], "policy": "strict",
                                            "note": FIXTURE_LABEL}, seed=11) as store:
        for key, parent, expert, island, generation, origin, status, runtime, source in STEPS:
            cid = store.add_candidate(source, [ids[parent]] if parent else [], expert, island, generation, origin)
            ids[key] = cid
            if origin == "llm":
                priced = expert != "repair"  # one unpriced call: its cost must read "unknown"
                store.add_llm_call(cid, expert, {"provider": "openai", "model": "fixture-model" if priced else
                                                 "local-unpriced", "input_tokens": 5200 + 100 * len(ids),
                                                 "output_tokens": 1400, "cost_usd": 0.021 if priced else None,
                                                 "latency_s": 31.0, "attempts": 1}, f"p{key}")
            store.event("proposed", candidate_id=cid, expert=expert,
                        reason=f"router: parent's focus led to {expert} (fixture)")
            record = evaluation(status, runtime)
            record.diagnosis = diagnose(record, source)
            store.finish_evaluation(store.start_evaluation(cid), record)
        store.add_llm_call(None, "compute", None, "p-failed", failure="timeout after 600 s (fixture)")
        store.event("stop", reason="max evaluations reached (12) (fixture)")
        write_outputs(store, {"kind": "cuda", "name": "NVIDIA H200"})
    return ids
