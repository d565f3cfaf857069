"""benchmarks/ncu_forward.py's summary of an `ncu --page details` text (what it reads of each kernel's block)."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "benchmarks" / "ncu_forward.py"

# two kernels' blocks as Nsight Compute prints them (abridged: other sections and metrics left out)
DETAILS = """==PROF== Connected to process 1234
  void cudnn::nchwToNhwcKernel<float, float, float, 0, 1, 0>(cudnn::nchw2nhwc_params_t<T3>, const T1 *, T2 *) (512, 1, 64)x(256, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Section: GPU Speed Of Light Throughput
    ----------------------- ----------- ------------
    Metric Name             Metric Unit Metric Value
    ----------------------- ----------- ------------
    DRAM Throughput                   %        72.01
    Duration                         us       104.06
    Compute (SM) Throughput           %        38.80
    Section: Instruction Statistics
    Issued Instructions                             inst   33,591,303
    Section: Launch Statistics
    Registers Per Thread             register/thread              32
    Section: Occupancy
    Achieved Occupancy                        %        94.55
  _conv2d_stats_0_kernel (8000, 1, 1)x(256, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Section: GPU Speed Of Light Throughput
    DRAM Throughput                   %         8.76
    Duration                         ms         1.42
    Compute (SM) Throughput           %        55.76
    Memory Throughput                          Gbyte/s       293.66
    Registers Per Thread             register/thread             119
"""


def _script():
    spec = importlib.util.spec_from_file_location("ncu_forward", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_summarize_reads_each_kernel_block():
    rows = _script().summarize(DETAILS)
    assert [r["kernel"] for r in rows] == ["void cudnn::nchwToNhwcKernel<float, float, float, 0, 1, 0>",
                                          "_conv2d_stats_0_kernel"]
    assert rows[0] == dict(rows[0], launch="(512, 1, 64)x(256, 1, 1)", duration_us=104.06, dram_pct=72.01,
                           sm_pct=38.8, issued_instructions=33591303.0, registers=32.0, occupancy_pct=94.55)
    assert rows[1]["duration_us"] == 1420.0 and rows[1]["registers"] == 119.0  # ms in microseconds
    assert "occupancy_pct" not in rows[1]  # not in its block: left out, not taken from another kernel


def test_the_command_line_writes_the_rows(tmp_path):
    text, out = tmp_path / "ncu.txt", tmp_path / "rows.json"
    text.write_text(DETAILS)
    done = subprocess.run([sys.executable, str(SCRIPT), "--summarize", str(text), "--json", str(out)],
                          capture_output=True, text=True, check=True)
    assert "_conv2d_stats_0_kernel" in done.stdout
    assert [r["duration_us"] for r in json.loads(out.read_text())["kernels"]] == [104.06, 1420.0]
    missing = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True)
    assert missing.returncode == 2 and "PROBLEM and CANDIDATE are required" in missing.stderr
