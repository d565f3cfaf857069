"""kfoundry.guard.policy: which findings fail a candidate, the dynamic findings, the physical floor."""

import pytest

from kfoundry.errors import UsageError
from kfoundry.guard.findings import RULES, Finding
from kfoundry.guard.policy import cheating_message, check_policy, dynamic_findings, physical_floor_ms, split


def test_every_rule_has_a_description_and_advice():
    assert len(RULES) >= 24
    for rule, (what, advice) in RULES.items():
        assert what and advice, rule


def test_strict_fails_everything_permissive_only_warns_about_pytorch_compute():
    findings = [Finding("torch-compute", "x.sum()", line=3), Finding("aten-compute", "aten::sum"),
                Finding("no-custom-kernel", "none"), Finding("library-kernel", "cublas")]
    failures, warnings = split(findings, "strict")
    assert failures == findings and warnings == []
    failures, warnings = split(findings, "permissive")
    assert [f.rule for f in failures] == ["no-custom-kernel"]
    assert {f.rule for f in warnings} == {"torch-compute", "aten-compute", "library-kernel"}


def test_unknown_policy_is_a_usage_error():
    check_policy("strict")
    with pytest.raises(UsageError, match="unknown policy"):
        check_policy("lenient")


def test_cheating_message_names_rule_line_and_advice():
    message = cheating_message([Finding("torch-compute", "torch.matmul in forward", line=12),
                                Finding("streams", "torch.cuda.Stream()", line=20)])
    assert message.startswith("[torch-compute] line 12: torch.matmul in forward — move the computation")
    assert "(and 1 more finding(s): streams)" in message


def test_dynamic_findings_from_a_worker_report():
    report = {
        "state_changes": ["torch.backends.cudnn.allow_tf32: True -> False", "time.perf_counter was replaced"],
        "launches_per_trial": [1, 0],
        "compute_ops": ["add", "mul"], "ops": {"add": 2, "mul": 1, "empty": 3},
        "library_kernels": ["sm90_xmma_gemm_f32f32_tf32f32"],
        "streams": [7, 13],
    }
    by_rule = {f.rule: f for f in dynamic_findings(report)}
    assert set(by_rule) == {"global-state-change", "no-custom-kernel", "aten-compute", "library-kernel", "side-stream"}
    assert "aten::add x2" in by_rule["aten-compute"].message and "empty" not in by_rule["aten-compute"].message
    assert "1 of 2 correctness runs" in by_rule["no-custom-kernel"].message
    assert "time.perf_counter was replaced" in by_rule["global-state-change"].evidence


def test_a_clean_report_has_no_findings():
    assert dynamic_findings({"state_changes": [], "launches_per_trial": [2, 2], "compute_ops": [],
                             "library_kernels": [], "streams": [7]}) == []


def test_physical_floor():
    # 1 GB read + 1 GB written, L2 of 50 MB, at the better of 4300 (measured) and 4800 (datasheet) GB/s, +10%
    floor = physical_floor_ms(10**9, 10**9, 50 * 10**6, [4300.0, 4800.0])
    assert floor == pytest.approx((2e9 - 50e6) / (4800e9 * 1.1) * 1e3)
    # outputs that fit in L2 need not reach memory
    assert physical_floor_ms(10**9, 10**6, 50 * 10**6, [4800.0]) == pytest.approx(1e9 / (4800e9 * 1.1) * 1e3)
    assert physical_floor_ms(10**9, 10**9, None, [0.0]) is None
