"""kfoundry.experts.device_text: every figure of the device, and where it comes from; on a CPU run a
target GPU's datasheet figures, never advice to the operator."""

from kfoundry.evaluate.shared.device_facts import prompt_device
from kfoundry.experts.device_text import device_lines
from kfoundry.types import DeviceFacts

from tests.experts.helpers import H200

CPU = DeviceFacts(kind="cpu", name="AMD EPYC (16 cores)", source="none: no ceilings on CPU")


def _text(facts):
    return "\n".join(device_lines(facts))


def test_a_measured_gpu_shows_every_figure():
    facts = DeviceFacts(**{**H200.__dict__, "registers_per_sm": 65536, "max_registers_per_thread": 255,
                           "compute_capability": "9.0"})
    text = _text(facts)
    for line in ("GPU: NVIDIA H200 (compute capability 9.0)", "SM count: 132",
                 "shared memory per block (opt-in max): 227 KiB (232448 bytes)",
                 "shared memory per SM: 228 KiB (233472 bytes)", "registers per SM (32-bit): 65536",
                 "registers per thread (max): 255", "L2 cache: 60.0 MiB", "device memory: 150.0 GiB",
                 "memory bandwidth (peak): 4321.5 GB/s",
                 "compute (peak): fp32 51.7 TFLOP/s, tf32 378.2 TFLOP/s, fp16 702.4 TFLOP/s",
                 "where the figures come from: sizes read from this GPU's properties; peaks: measured"):
        assert line in text.splitlines(), line
    assert "target" not in text and "not measured" not in text


def test_a_gpu_record_without_registers_says_not_measured():
    text = _text(H200)  # a record cached before the registers were kept
    assert "GPU: NVIDIA H200 (compute capability not measured)" in text
    assert "registers per SM (32-bit): not measured" in text


def test_a_named_target_on_cpu_shows_its_datasheet_figures():
    text = _text(prompt_device(CPU, "H200"))
    lines = text.splitlines()
    assert lines[0] == "target GPU: NVIDIA H200 (compute capability 9.0); the figures below are its datasheet figures"
    assert "speed is not measured on this run" in lines[1] and "CPU" in lines[1] and "Triton's interpreter" in lines[1]
    for line in ("SM count: 132", "shared memory per block (opt-in max): 227 KiB (232448 bytes)",
                 "shared memory per SM: 228 KiB (233472 bytes)", "registers per SM (32-bit): 65536",
                 "registers per thread (max): 255", "L2 cache: 50.0 MiB", "device memory: 141.0 GiB",
                 "memory bandwidth (peak): 4800 GB/s",
                 "compute (peak): fp32 67 TFLOP/s, tf32 495 TFLOP/s, fp16 990 TFLOP/s, bf16 990 TFLOP/s"):
        assert line in lines, line
    assert lines[-1] == ("where the figures come from: datasheet (bundled table): not measured on this machine; "
                         "this run is on AMD EPYC (16 cores), a CPU")


def test_no_target_named_shows_a_typical_one_and_no_advice_to_the_operator():
    for facts in (CPU, prompt_device(CPU, None), None):
        text = _text(facts)
        assert text.startswith("target GPU: unknown (no target GPU was named); the figures below are a typical "
                               "target's, the datasheet figures of the NVIDIA H100 SXM (compute capability 9.0)")
        assert "SM count: 132" in text and "shared memory per block (opt-in max): 227 KiB" in text
        assert "--target-gpu" not in text and "target_gpu" not in text and "48+ KiB" not in text
    assert "AMD EPYC (16 cores)" in _text(CPU)


def test_an_ada_target_shows_its_smaller_shared_memory():
    text = _text(prompt_device(CPU, "rtx 4090"))
    assert "NVIDIA GeForce RTX 4090 (compute capability 8.9)" in text
    assert "shared memory per block (opt-in max): 99 KiB (101376 bytes)" in text and "SM count: 128" in text
