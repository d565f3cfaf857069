"""kfoundry.diagnose.sanitizer: the wrapper command, memcheck logs (current and older formats), the
unmasked-access scan of a Triton kernel, and the findings. The logs under fixtures/diagnose/tools
are in compute-sanitizer's real format."""

from pathlib import Path

from kfoundry.diagnose.sanitizer import (kernel_identifier, parse_memcheck, sanitizer_command, sanitizer_findings,
                                         unmasked_accesses)
from tests.helpers import marker_line

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TOOLS = FIXTURES / "diagnose" / "tools"
OOB = FIXTURES / "diagnose" / "oob_unmasked.py"


def read(name: str) -> str:
    return (TOOLS / name).read_text()


def test_command():
    command = sanitizer_command("/tmp/x/memcheck.log")
    assert command[:3] == ["compute-sanitizer", "--tool", "memcheck"]
    assert command[command.index("--print-limit") + 1] == "20"
    assert command[command.index("--log-file") + 1] == "/tmp/x/memcheck.log"


def test_invalid_read_in_a_triton_kernel():
    report = parse_memcheck(read("memcheck_oob_read.log"))
    assert report["summary"] == "ERROR SUMMARY: 13 errors" and report["error_count"] == 13
    assert len(report["errors"]) == 3
    first = report["errors"][0]
    assert first["kind"] == "Invalid __global__ read" and first["size"] == 8
    assert first["kernel"] == "_oob_affine_kernel" and first["pc offset"] == "0x1f0"
    assert first["thread"] == "(116,0,0)" and first["block"] == "(3,0,0)"
    assert first["address"] == "0x7f0c3a200fa0"
    assert first["detail"] == ("is out of bounds and is 1 bytes after the nearest allocation at 0x7f0c3a200000 "
                               "of size 4,000 bytes")
    assert first["line"] == 13 and first["file"].endswith("oob_unmasked.py")
    assert report["api_errors"][0].startswith("Program hit cudaErrorLaunchFailure")


def test_cuda_write_current_and_old_at_lines():
    report = parse_memcheck(read("memcheck_cuda_write.log"))
    new, old = report["errors"]
    assert new["kind"] == "Invalid __global__ write" and new["kernel"] == "relu_kernel"
    assert new["function"] == "relu_kernel(const float *, float *, int)" and new["line"] == 9
    assert old["kernel"] == "relu_kernel" and old["pc offset"] == "0x000000d0" and old["line"] == 9
    assert old["address"] == "0x7fd1c6f42404" and old["detail"] == "is out of bounds"


def test_clean_log():
    report = parse_memcheck(read("memcheck_clean.log"))
    assert report["errors"] == [] and report["error_count"] == 0
    (finding,) = sanitizer_findings(report)
    assert finding.severity == "info" and "no errors" in finding.title
    assert parse_memcheck("") == {"errors": [], "api_errors": [], "summary": None, "error_count": None,
                                  "unprinted": 0}
    assert sanitizer_findings(parse_memcheck("")) == []


def test_kernel_identifier():
    assert kernel_identifier("void ns::add<float>(const float *, int)") == "add"
    assert kernel_identifier("_oob_affine_kernel") == "_oob_affine_kernel"
    assert kernel_identifier(None) is None


def test_unmasked_accesses_in_the_named_kernel_only():
    source = OOB.read_text()
    (access,) = unmasked_accesses(source, "_oob_affine_kernel")
    assert access["op"] == "load" and access["line"] == marker_line(OOB, "UNMASKED")
    assert unmasked_accesses(source, "other_kernel") == []
    masked = (FIXTURES / "candidates" / "affine_ok.py").read_text()
    assert unmasked_accesses(masked, "_affine_kernel") == []
    positional = ("def k(p, q, n):\n    a = tl.load(p, offs < n)\n    tl.store(q, a, offs < n)\n"
                  "    b = tl.load(bp, boundary_check=(0,))\n    tl.store(q + 1, b)\n")
    assert [(a["op"], a["line"]) for a in unmasked_accesses(positional, "k")] == [("store", 5)]


def test_finding_points_at_the_unmasked_load():
    report = parse_memcheck(read("memcheck_oob_read.log"))
    (finding,) = sanitizer_findings(report, OOB.read_text(), str(OOB))
    assert finding.category == "sanitizer" and finding.severity == "error"
    assert "Invalid __global__ read" in finding.title and "_oob_affine_kernel" in finding.title
    assert finding.location.line == marker_line(OOB, "UNMASKED")
    assert finding.location.function == "_oob_affine_kernel"
    assert "tl.load(x_ptr + offs)" in finding.location.text
    assert any("4,000 bytes" in e for e in finding.evidence)
    assert finding.data["unmasked"][0]["op"] == "load"
    assert "mask" in finding.direction


def test_finding_without_a_reported_line_uses_the_scan():
    report = parse_memcheck(read("memcheck_oob_read.log"))
    for error in report["errors"]:
        error["file"] = error["line"] = None
    (finding,) = sanitizer_findings(report, OOB.read_text())
    assert finding.location.line == marker_line(OOB, "UNMASKED") and finding.location.column is not None


def test_cuda_kernel_points_at_its_declaration_in_the_candidate():
    source = (FIXTURES / "candidates" / "cuda_inline.py").read_text().replace("affine_kernel", "relu_kernel")
    (finding,) = sanitizer_findings(parse_memcheck(read("memcheck_cuda_write.log")), source)
    assert "__global__" in finding.location.text and finding.location.function == "relu_kernel"
    assert any("cuda.cu:9" in e for e in finding.evidence)


def test_log_recorded_on_the_h200():
    # compute-sanitizer on an NVIDIA H200 (driver 580), `bash scripts/gpu_checks.sh diagnose`:
    # tests/fixtures/diagnose/error_oob_segfault.py, the last 20000 characters of its log
    report = parse_memcheck(read("h200_memcheck_oob.log"))
    assert report["summary"] == "ERROR SUMMARY: 258 errors" and report["error_count"] == 258
    assert report["unprinted"] == 238
    first = report["errors"][0]
    assert (first["kind"], first["size"], first["kernel"]) == ("Invalid __global__ read", 4, "_affine_kernel")
    assert first["line"] == 12 and first["file"] == "error_oob_segfault.py"
    assert first["detail"].startswith("is out of bounds and is 8,589,934,592 bytes before the nearest allocation")
    source = (FIXTURES / "diagnose" / "error_oob_segfault.py").read_text()
    finding = sanitizer_findings(report, source, "error_oob_segfault.py")[0]
    assert finding.location.line == 12 and "_affine_kernel" in finding.title
