"""kfoundry.doctor.machine: versions, GPUs with their free memory and who holds it, JAX's preallocation. The
GPU figures are NVML's (kfoundry.gpu_usage) as it gives them: given here, since this machine has no GPU."""

from __future__ import annotations

import os

from kfoundry.doctor.machine import check_gpus, check_jax, check_versions
from kfoundry.gpu_usage import GpuMemory, GpuProcess, GpuUsage

GIB = 1 << 30


def _usage(*processes: GpuProcess) -> GpuUsage:
    return GpuUsage([GpuMemory(0, "NVIDIA H200", "GPU-0", 140 * GIB, 70 * GIB, tuple(processes))], "nvml")


def test_versions_name_torch_triton_and_python():
    import torch

    check = check_versions()
    assert check.ok and check.detail.startswith(f"torch {torch.__version__} (")


def test_a_gpu_half_held_by_another_process_is_a_problem_naming_it():
    checks = check_gpus(_usage(GpuProcess(1, 70 * GIB, "python train.py")), cuda="12.8")
    assert len(checks) == 1 and checks[0].name == "gpu 0" and not checks[0].ok
    assert checks[0].detail == ("GPU 0 (NVIDIA H200): 70.0 of 140.0 GiB free; pid 1 (python train.py) holds 70.00 GiB "
                                "(from nvml): other processes hold 70.0 GiB")
    assert "--device cuda:N" in checks[0].fix


def test_a_free_gpu_and_our_own_processes_are_ok():
    assert check_gpus(_usage(), cuda="12.8")[0].ok
    assert check_gpus(_usage(GpuProcess(os.getpid(), 70 * GIB, "kfoundry")), cuda="12.8")[0].ok


def test_gpus_that_a_cpu_build_of_torch_cannot_use_are_a_problem():
    check, = check_gpus(_usage(), cuda=None)
    assert not check.ok and "torch is a CPU build" in check.detail and "CUDA build of torch" in check.fix


def test_no_gpu_is_fine_on_a_cpu_machine():
    check, = check_gpus(GpuUsage(reason="no nvidia-smi on PATH"), cuda=None)
    assert check.ok and "evaluations run on the CPU" in check.detail


def test_jax_with_a_gpu_and_preallocation_on_is_a_problem(tmp_path, monkeypatch):
    (tmp_path / "jax").mkdir()
    (tmp_path / "jax" / "__init__.py").write_text("raise RuntimeError('the doctor must not import jax')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    check = check_jax(_usage())
    assert not check.ok and "takes 75% of every visible GPU's memory" in check.detail
    assert check.fix.startswith("export XLA_PYTHON_CLIENT_PREALLOCATE=false")
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    assert check_jax(_usage()).ok
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE")
    assert check_jax(GpuUsage(reason="none")).ok  # no GPU for it to take


def test_the_workers_get_jaxs_setting():
    from kfoundry.sandbox.environment import evaluation_environment

    setting = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    assert evaluation_environment(setting) == setting


def test_a_run_on_one_gpu_is_told_of_that_gpu_alone(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    usage = GpuUsage([GpuMemory(i, "NVIDIA H200", f"GPU-{i}", 140 * GIB, 70 * GIB,
                                (GpuProcess(1, 70 * GIB, "python train.py"),) if i == 0 else ()) for i in range(2)],
                     "nvml")
    assert [c.name for c in check_gpus(usage, cuda="12.8")] == ["gpu 0", "gpu 1"]
    checks = check_gpus(usage, cuda="12.8", device="cuda:1")
    assert [c.name for c in checks] == ["gpu 1"] and checks[0].ok
