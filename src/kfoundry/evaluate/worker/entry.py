"""A worker process, entered through kfoundry.sandbox.start (`python -m kfoundry.sandbox.start`).

Imports torch (and Triton) first, says `ready`, then reads one job from stdin, runs it and exits.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import threading
import time
import traceback
from typing import Any

from kfoundry.evaluate.shared.protocol import CHANNEL_FD_ENV


FAST_EXIT_LABELS = ("candidate", "reference", "judge", "baselines")


class Channel:
    """JSON lines to the parent on the pipe it gave (flushed at once), replies from it on stdin."""

    def __init__(self, fd: int | None) -> None:
        self._file = os.fdopen(fd, "w", encoding="utf-8", buffering=1) if fd is not None else None
        self._t0 = time.monotonic()
        self._next = 0
        self._writing = threading.Lock()  # the judge answers from several threads: one line at a time

    def send(self, **message: Any) -> None:
        message["t"] = round(time.monotonic() - self._t0, 4)
        message["wall"] = round(time.time(), 4)  # the parent's clock too: how long the job waited, and the exit
        if self._file is not None:
            line = json.dumps(message, default=str) + "\n"
            with self._writing:
                self._file.write(line)
                self._file.flush()

    def phase(self, name: str) -> None:
        self.send(phase=name)

    def result(self, result: dict[str, Any]) -> None:
        self.send(result=result)

    def request(self, kind: str, **data: Any) -> dict[str, Any]:
        """Ask the parent (which asks the judge) and wait for its reply."""
        self._next += 1
        self.send(request=kind, id=self._next, **data)
        while True:
            line = sys.stdin.readline()
            if not line:
                raise RuntimeError("the parent closed the channel")
            try:
                reply = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(reply, dict) and reply.get("reply") == self._next:
                return reply

    def receive(self) -> dict[str, Any] | None:
        """The next message from the parent (a long-lived worker's next order), None at its end."""
        while True:
            line = sys.stdin.readline()
            if not line:
                return None
            try:
                message = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(message, dict):
                return message


def _fast_saves() -> None:
    """No CRC-32 over what torch.save writes: the files go to the parent through the local disk, and
    the checksum made saving a 256 MB result about three times slower (it stays readable)."""
    try:
        from torch.utils.serialization import config

        config.save.compute_crc32 = False
    except (ImportError, AttributeError):  # an older torch: saves as before
        pass


def _warm_up(device: str, label: str) -> None:
    """What every job would pay before its own work, paid while this worker waits as the spare (measured
    on an H200: about 5 s of a 15 s evaluation): the GPU's context, the job modules, and the modules the
    guard's dispatch mode imports on its first use (torch._dynamo, about 1 s). Only imports and a
    context: nothing a job could see. A failure here is left for the job to meet and report."""
    import torch

    from kfoundry.evaluate.timing.gpu_lock import process_lock

    try:
        if device.startswith("cuda"):
            # another worker may be timing on this GPU: making a context waits for it
            with process_lock(label).shared("context"):
                if ":" in device:
                    torch.cuda.set_device(device)
                torch.empty(1, device=device)
        import kfoundry.evaluate.reference.reference_job  # noqa: F401

        if label == "candidate":
            import kfoundry.evaluate.worker.candidate_job  # noqa: F401
            from kfoundry.guard.dynamic import LaunchTracker, OpRecorder

            with OpRecorder(LaunchTracker()):  # not installed: a bare pass-through of the guard's dispatch mode
                torch.empty(1)
    except Exception:
        pass


def main(sandbox: dict[str, Any] | None = None, lifeline=None) -> int:
    """`sandbox`: what kfoundry.sandbox.start put in force before this ran, reported with `ready`;
    `lifeline`: its kfoundry.sandbox.lifeline.Lifeline, given the job's own deadline."""
    faulthandler.enable()  # a segfault leaves the Python stack (with the candidate's line) in stderr
    fd = os.environ.get(CHANNEL_FD_ENV)
    channel = Channel(int(fd) if fd and fd.isdigit() else None)
    import torch  # the expensive import, done before the job arrives

    _fast_saves()

    try:
        import triton  # noqa: F401
    except ImportError:
        pass
    _warm_up(os.environ.get("KFOUNDRY_WORKER_DEVICE", "cpu"), os.environ.get("KFOUNDRY_WORKER_LABEL", ""))
    channel.send(phase="ready", sandbox=sandbox or {})
    line = sys.stdin.readline()
    if not line:
        return 0
    job = json.loads(line)
    if lifeline is not None:
        lifeline.set_deadline(job.get("deadline_s"))
    if str(job.get("device", "")).startswith("cuda:"):
        # Triton launches, and CUDA events record, on the current device: make it the job's GPU
        torch.cuda.set_device(job["device"])
    channel.phase("start")
    try:
        if job["kind"] == "reference":
            from kfoundry.evaluate.reference.reference_job import run_reference_job

            result = run_reference_job(job, channel)
        elif job["kind"] == "candidate":
            from kfoundry.evaluate.worker.candidate_job import run_candidate_job

            result = run_candidate_job(job, channel)
        elif job["kind"] == "judge":
            from kfoundry.evaluate.reference.judge_job import run_judge

            result = run_judge(job, channel)
        elif job["kind"] == "baselines":
            from kfoundry.evaluate.reference.baseline_job import run_baseline_job

            result = run_baseline_job(job, channel)
        elif job["kind"] == "replay":
            from kfoundry.evaluate.worker.replay_job import run_replay_job

            result = run_replay_job(job, channel)
        elif job["kind"] == "probe":  # kfoundry doctor: what a worker can read and import here
            from kfoundry.doctor.probe_job import run_probe_job

            result = run_probe_job(job, channel)
        else:
            result = {"internal_error": f"unknown job kind {job['kind']!r}"}
    except BaseException as exc:  # last resort: report rather than die silently
        result = {"internal_error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    channel.result(result)
    sys.stdout.flush()
    sys.stderr.flush()
    if os.environ.get("KFOUNDRY_WORKER_LABEL") in FAST_EXIT_LABELS:
        # the result is on disk: skip the interpreter's teardown (modules, the GPU context, the profiler),
        # which the parent would wait for; tools under a wrapper (compute-sanitizer) exit normally
        os._exit(0)
    return 0


if __name__ == "__main__":  # without the sandbox: only for running a job by hand
    sys.exit(main())
