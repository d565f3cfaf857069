"""kfoundry.diagnose.ncu: the wrapper command, the CSV log in both layouts (details page, raw page),
and the findings per kernel. The logs under fixtures/diagnose/tools are in ncu's real format."""

from pathlib import Path

import pytest

from kfoundry.diagnose.ncu import (DRAM, DURATION, METRICS, OCCUPANCY, SM, TENSOR_GMMA, ncu_command, ncu_errors,
                                   ncu_findings, parse_ncu_csv, parse_value)

TOOLS = Path(__file__).resolve().parent.parent / "fixtures" / "diagnose" / "tools"


def read(name: str) -> str:
    return (TOOLS / name).read_text()


def test_command_profiles_only_the_bracketed_range_of_every_process():
    command = ncu_command("/tmp/x/ncu.log")
    assert command[0] == "ncu"
    for flag, value in (("--target-processes", "all"), ("--clock-control", "none"),
                        ("--profile-from-start", "off"), ("--log-file", "/tmp/x/ncu.log")):
        assert command[command.index(flag) + 1] == value
    assert "--csv" in command
    metrics = command[command.index("--metrics") + 1].split(",")
    assert set(metrics) == set(METRICS) and {OCCUPANCY, DRAM, SM, TENSOR_GMMA} <= set(metrics)
    assert ncu_command("log", executable="/usr/local/cuda/bin/ncu")[0] == "/usr/local/cuda/bin/ncu"


def test_values_with_separators_and_na():
    assert parse_value("1,234.5") == 1234.5
    assert parse_value("91.87") == 91.87
    assert parse_value("n/a") is None and parse_value("") is None and parse_value(None) is None


def test_details_page_one_kernel():
    (record,) = parse_ncu_csv(read("ncu_pointwise_chain.csv"))
    assert record["name"] == "_affine_gelu_clamp_kernel"
    assert record["id"] == 0 and record["grid"] == "(65536, 1, 1)" and record["cc"] == "9.0"
    assert record["metrics"][DRAM] == 91.87
    assert record["metrics"][SM] == 27.43
    assert record["metrics"][OCCUPANCY] == 86.12
    assert record["metrics"][DURATION] == 118.18 and record["units"][DURATION] == "us"
    assert all(isinstance(v, float) for v in record["metrics"].values())


def test_details_page_several_launches_in_order():
    records = parse_ncu_csv(read("ncu_unfused_chain.csv"))
    assert [r["name"] for r in records] == ["_scale_shift_kernel", "_gelu_kernel", "_clamp_kernel"]
    assert [r["id"] for r in records] == [0, 1, 2]


def test_raw_page_with_units_row():
    (record,) = parse_ncu_csv(read("ncu_raw_matmul.csv"))
    assert record["name"] == "matmul_kernel"
    assert record["metrics"][DURATION] == 2731.52  # "2,731.52"
    assert record["units"][SM] == "%"
    assert record["metrics"][OCCUPANCY] == 12.48


def test_no_table_and_errors():
    text = read("ncu_no_permission.log")
    assert parse_ncu_csv(text) == []
    errors = ncu_errors(text)
    assert errors[0].startswith("==ERROR== ERR_NVGPUCTRPERM")
    assert parse_ncu_csv("") == []


def test_memory_bound_kernel_finding():
    (finding,) = ncu_findings(parse_ncu_csv(read("ncu_pointwise_chain.csv")))
    assert finding.category == "ncu"
    assert finding.data["verdict"] == "memory"
    assert "DRAM 92%" in finding.title and "occupancy 86%" in finding.title
    assert finding.data["metrics"][DRAM] == pytest.approx(91.87)


def test_compute_bound_without_tensor_cores():
    (finding,) = ncu_findings(parse_ncu_csv(read("ncu_raw_matmul.csv")))
    assert finding.data["verdict"] == "compute"
    assert "tensor pipes idle" in finding.direction


def test_findings_per_kernel_name_longest_first():
    records = parse_ncu_csv(read("ncu_unfused_chain.csv"))
    records.append({**records[0], "id": 3})  # a second launch of the first kernel
    findings = ncu_findings(records)
    assert len(findings) == 3
    assert findings[0].data["kernel"] == "_scale_shift_kernel" and findings[0].data["launches"] == 2
    assert findings[0].data["duration"] == pytest.approx(2 * 119.30)


def test_latency_verdict_from_low_occupancy():
    record = {"name": "k", "metrics": {DRAM: 8.0, SM: 11.0, OCCUPANCY: 12.0, DURATION: 40.0}, "units": {}}
    (finding,) = ncu_findings([record])
    assert finding.data["verdict"] == "latency" and "occupancy" in finding.direction


def test_log_recorded_on_the_h200():
    # ncu 2025.x on an NVIDIA H200 (driver 580), `bash scripts/gpu_checks.sh diagnose`, examples/layernorm
    (record,) = parse_ncu_csv(read("h200_ncu_layernorm.log"))
    assert record["name"] == "_layernorm_kernel"
    assert record["metrics"][DRAM] == 82.53 and record["metrics"][DURATION] == 128832.0
    assert record["metrics"][OCCUPANCY] == 68.86 and record["metrics"][SM] == 25.21
    assert record["metrics"][TENSOR_GMMA] is None  # "n/a" on this kernel
    assert ncu_findings([record])[0].data["verdict"] == "memory"
