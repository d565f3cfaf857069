"""kfoundry.diagnose.performance: roofline, bound, kernel breakdown, Triton metadata and the rule
chosen, on Evaluations built by hand with H200 numbers (4.8 TB/s; 67 TFLOP/s FP32 without tensor
cores, 495 TF32, 989 BF16 dense)."""

import pytest

from kfoundry.diagnose.performance import RULES, estimate_occupancy, performance_findings
from kfoundry.types import (FOCUSES, CorrectnessReport, DeviceFacts, Evaluation, ProblemCost, TimingReport)

H200 = DeviceFacts(kind="cuda", name="NVIDIA H200", sm_count=132, shared_memory_per_block_bytes=232448,
                   shared_memory_per_sm_bytes=233472, peak_bandwidth_gbs=4800.0,
                   peak_tflops={"fp32": 67.0, "tf32": 495.0, "fp16": 989.0, "bf16": 989.0}, source="datasheet")
CHAIN_BYTES = 4096 * 16384 * 4  # examples/pointwise_chain: one fp32 input, one output of that size


def make(runtime_ms, *, flops=0, input_bytes=CHAIN_BYTES, output_bytes=CHAIN_BYTES, parameter_bytes=0,
         precision="fp32", tolerance=1e-4, kernels=(), triton=(), own=(), eager_ms=None, compile_ms=None):
    timing = TimingReport(runtime_ms=runtime_ms, trials=100, device="NVIDIA H200", method="cuda events, L2 flushed",
                          eager_ms=eager_ms, compile_ms=compile_ms,
                          speedup_eager=eager_ms / runtime_ms if eager_ms else None,
                          speedup_compile=compile_ms / runtime_ms if compile_ms else None)
    return Evaluation(
        status="ok", message="", device="cuda:0", timing=timing,
        correctness=CorrectnessReport(precision=precision, tolerance=tolerance),
        cost=ProblemCost(flops=flops, input_bytes=input_bytes, output_bytes=output_bytes,
                         parameter_bytes=parameter_bytes),
        device_facts=H200, guard={"kernel_names": list(own)},
        profile={"kernels": [{"name": n, "stream": 7, "duration_us": d} for n, d in kernels], "triton": list(triton)})


def meta(name, warps=4, stages=3, regs=32, spills=0, shared=0):
    return {"name": name, "num_warps": warps, "num_stages": stages, "n_regs": regs, "n_spills": spills,
            "shared_bytes": shared}


def by_category(findings, category):
    return [f for f in findings if f.category == category]


def bound_finding(findings):
    (finding,) = by_category(findings, "bound")
    return finding


def test_near_roofline_pointwise_chain():
    evaluation = make(0.1245, kernels=[("_affine_gelu_clamp_kernel", 118.2)], own=["_affine_gelu_clamp_kernel"],
                      triton=[meta("_affine_gelu_clamp_kernel", regs=24)], eager_ms=0.95, compile_ms=0.13)
    findings, bound = performance_findings(evaluation)
    assert bound == "memory"
    (roof,) = by_category(findings, "roofline")
    ideal_ms = 2 * CHAIN_BYTES / 4.8e12 * 1e3
    assert roof.data["roofline_ms"] == pytest.approx(ideal_ms)
    assert roof.data["fraction_of_roofline"] == pytest.approx(ideal_ms / 0.1245)
    assert roof.data["fraction_of_roofline"] == pytest.approx(0.898, abs=1e-3)
    assert roof.data["achieved_gbs"] == pytest.approx(2 * CHAIN_BYTES / 0.1245e-3 / 1e9)
    assert roof.data["side"] == "memory"
    assert bound_finding(findings).data["rule"] == "near-roofline"
    (baseline,) = by_category(findings, "baseline")
    assert baseline.data["beats_compile"] is True
    assert baseline.data["speedup_eager"] == pytest.approx(0.95 / 0.1245)
    (kernels,) = by_category(findings, "kernels")
    assert kernels.data["kernels"][0]["share"] == 1.0 and kernels.data["kernels"][0]["own"]
    (triton,) = by_category(findings, "triton-metadata")
    assert triton.data["occupancy"]["occupancy"] == 1.0 and triton.severity == "info"


def test_memory_bound_several_kernels_says_fuse_and_flags_foreign_kernels():
    copy = "void at::native::elementwise_kernel<128, 2, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)>"
    kernels = [("_scale_shift_kernel", 119.3), ("_gelu_kernel", 121.1), (copy, 60.0), ("_clamp_kernel", 118.7)]
    own = ["_scale_shift_kernel", "_gelu_kernel", "_clamp_kernel"]
    evaluation = make(0.425, kernels=kernels, own=own, eager_ms=0.95, compile_ms=0.13)
    findings, bound = performance_findings(evaluation)
    assert bound == "memory"
    roof = by_category(findings, "roofline")[0]
    assert roof.data["fraction_of_roofline"] == pytest.approx(2 * CHAIN_BYTES / 4.8e12 / 0.425e-3)
    finding = bound_finding(findings)
    assert finding.data["rule"] == "fuse-kernels"
    assert "4 launches" in finding.direction
    breakdown, foreign = by_category(findings, "kernels")
    rows = {row["name"]: row for row in breakdown.data["kernels"]}
    assert not rows[copy]["own"] and rows["_gelu_kernel"]["own"]
    assert breakdown.data["launches"] == 4
    assert breakdown.data["busy_us"] == pytest.approx(419.1)
    assert rows[copy]["share"] == pytest.approx(60.0 / 419.1)
    assert foreign.severity == "warning" and foreign.data["foreign"] == [copy]
    assert by_category(findings, "baseline")[0].data["beats_compile"] is False


def test_launch_bound_small_problem():
    small = 4 * 250 * 4
    evaluation = make(0.018, input_bytes=small, output_bytes=small, own=["_a", "_b", "_c"],
                      kernels=[("_a", 1.8), ("_b", 1.7), ("_c", 1.9)], eager_ms=0.012, compile_ms=0.02)
    findings, bound = performance_findings(evaluation)
    assert bound == "launch"
    finding = bound_finding(findings)
    assert finding.data["rule"] == "launch-bound"
    assert finding.data["focus"] == "launch"
    assert "persistent kernel" in finding.direction
    baseline = by_category(findings, "baseline")[0]
    assert baseline.severity == "warning"  # slower than eager


def test_launch_count_falls_back_to_the_guard_when_not_profiled():
    evaluation = make(0.012, input_bytes=4000, output_bytes=4000)
    evaluation.profile = {}
    evaluation.guard["launches_per_trial"] = [2, 2]
    _, bound = performance_findings(evaluation)
    assert bound == "launch"


def test_compute_bound_fp32_matmul_below_peak():
    n = 4096
    evaluation = make(8.2, flops=2 * n**3, input_bytes=2 * n * n * 4, output_bytes=n * n * 4,
                      kernels=[("matmul_kernel", 8150.0)], own=["matmul_kernel"],
                      triton=[meta("matmul_kernel", warps=8, stages=3, regs=128, shared=98304)],
                      eager_ms=2.9, compile_ms=2.8)
    findings, bound = performance_findings(evaluation)
    assert bound == "compute"
    roof = by_category(findings, "roofline")[0]
    assert roof.data["peak_key"] == "fp32" and roof.data["peak_tflops"] == 67.0
    assert roof.data["achieved_tflops"] == pytest.approx(2 * n**3 / 8.2e-3 / 1e12)
    assert roof.data["compute_ms"] == pytest.approx(2 * n**3 / 67e12 * 1e3)
    assert roof.data["fraction_of_roofline"] == pytest.approx(0.250, abs=1e-3)
    assert roof.data["roofline_ms_tf32"] == pytest.approx(2 * n**3 / 495e12 * 1e3)
    finding = bound_finding(findings)
    assert finding.data["rule"] == "fp32-matmul-below-peak"
    assert "tf32x3" in finding.direction  # the tolerance 1e-4 rules plain TF32 out
    occupancy = by_category(findings, "triton-metadata")[0].data["occupancy"]
    assert occupancy["occupancy"] == pytest.approx(0.25) and occupancy["blocks_per_sm"] == 2


def test_fp32_matmul_with_a_loose_tolerance_admits_tf32():
    n = 4096
    evaluation = make(8.2, flops=2 * n**3, input_bytes=2 * n * n * 4, output_bytes=n * n * 4, tolerance=1e-2)
    finding = bound_finding(performance_findings(evaluation)[0])
    assert finding.data["rule"] == "fp32-matmul-below-peak" and "admits TF32" in finding.direction


def test_faster_than_fp32_fma_peak_means_tf32_tensor_cores():
    n = 4096
    evaluation = make(0.6, flops=2 * n**3, input_bytes=2 * n * n * 4, output_bytes=n * n * 4, tolerance=1e-2)
    findings, bound = performance_findings(evaluation)
    roof = by_category(findings, "roofline")[0]
    assert roof.data["peak_key"] == "tf32" and roof.data["peak_tflops"] == 495.0
    assert roof.data["fraction_of_roofline"] == pytest.approx(2 * n**3 / 495e12 / 0.6e-3)
    assert bound == "compute"
    assert bound_finding(findings).data["rule"] == "compute-below-peak"


def test_register_limited_occupancy_with_spills():
    source = "import triton\n\n\n@triton.jit\ndef _softmax_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n    pass\n"
    rows, cols = 8192, 8192
    evaluation = make(0.28, input_bytes=rows * cols * 4, output_bytes=rows * cols * 4,
                      kernels=[("_softmax_kernel", 275.0)], own=["_softmax_kernel"],
                      triton=[meta("_softmax_kernel", warps=8, stages=1, regs=255, spills=48)])
    findings, bound = performance_findings(evaluation, source)
    assert bound == "memory"
    finding = bound_finding(findings)
    assert finding.data["rule"] == "register-spills"
    also = [item["rule"] for item in finding.data["also"]]
    assert also[:2] == ["low-occupancy-registers", "memory-below-bandwidth"]
    (triton,) = by_category(findings, "triton-metadata")
    assert triton.severity == "warning"
    assert triton.data["occupancy"]["occupancy"] == pytest.approx(8 / 64)
    assert triton.data["occupancy"]["limiter"] == "registers"
    assert triton.location.line == 5 and triton.location.function == "_softmax_kernel"


def test_far_below_both_roofs_with_one_kernel_is_latency_bound():
    evaluation = make(3.5, kernels=[("_slow_kernel", 3490.0)], own=["_slow_kernel"])
    findings, bound = performance_findings(evaluation)
    assert bound == "latency"
    assert bound_finding(findings).data["rule"] == "latency-bound"


def test_cpu_says_speed_is_not_measured():
    evaluation = Evaluation(status="ok", message="", device="cpu",
                            timing=TimingReport(reason="no GPU: the interpreter is not a performance measurement"),
                            device_facts=DeviceFacts(kind="cpu", name="x86"),
                            cost=ProblemCost(flops=0, input_bytes=4000, output_bytes=4000, parameter_bytes=0))
    findings, bound = performance_findings(evaluation)
    assert bound is None
    (finding,) = findings
    assert finding.severity == "info" and "not measured on CPU" in finding.title


def test_failed_evaluation_has_no_performance_findings():
    evaluation = make(1.0)
    evaluation.status = "wrong_output"
    assert performance_findings(evaluation) == ([], None)


def test_no_ceilings_gives_no_bound_but_no_error():
    evaluation = make(1.0, kernels=[("_k", 990.0)], own=["_k"])
    evaluation.device_facts = DeviceFacts(kind="cuda", name="unknown GPU", source="unknown device: no ceilings")
    findings, bound = performance_findings(evaluation)
    assert bound is None
    assert by_category(findings, "roofline")[0].title.startswith("no roofline")


def test_occupancy_estimate_by_each_limit():
    assert estimate_occupancy(4, 32, 0)["occupancy"] == 1.0
    registers = estimate_occupancy(8, 255, 0)
    assert registers["limiter"] == "registers" and registers["warps_per_sm"] == 8
    shared = estimate_occupancy(4, 32, 200 * 1024, 233472)
    assert shared["limiter"] == "shared memory" and shared["blocks_per_sm"] == 1
    assert estimate_occupancy(4, None, 0) is None


def test_rule_table_is_well_formed():
    names = [rule.name for rule in RULES]
    assert len(names) == len(set(names))
    assert all(rule.focus in FOCUSES for rule in RULES)
    assert names.index("launch-bound") < names.index("near-roofline") < names.index("register-spills")
