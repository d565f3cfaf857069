"""The GPU lock across real processes: exclusive phases run alone, shared ones overlap, a waiting
exclusive request holds back new shared ones, and a SIGKILLed holder blocks no one.

The fake workers load gpu_lock.py by file path rather than `import kfoundry.evaluate.timing.gpu_lock`:
the package's __init__ imports torch (seconds per process on this machine), the module itself
needs only the standard library, and the test is about the lock, not the package."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kfoundry.evaluate.timing import gpu_lock
from kfoundry.evaluate.timing.gpu_lock import (
    ENV_LOCK,
    ENV_TIMELINE,
    GpuLock,
    NoLock,
    ThreadLocks,
    Span,
    concurrency,
    exclusive_overlaps,
    from_environment,
    lock_path,
    process_lock,
    read_timeline,
    render_timeline,
)

# A fake worker: runs a plan of steps (JSON in argv) against one lock, prints its waited_s.
WORKER = textwrap.dedent(
    """
    import importlib.util, json, os, sys, time
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("gpu_lock_under_test", sys.argv[1])
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up by name
    spec.loader.exec_module(module)
    lock_file, timeline, label, plan = sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5])
    lock = module.GpuLock(lock_file, timeline=timeline, label=label)

    def run(steps):
        for step in steps:
            kind = step["do"]
            if kind == "touch":
                Path(step["path"]).write_text(repr(time.monotonic()))
            elif kind == "wait_file":
                while not os.path.exists(step["path"]):
                    time.sleep(0.005)
            elif kind == "sleep":
                time.sleep(step["s"])
            else:  # "shared" | "exclusive": hold the phase, sleeping and running the inner steps
                with getattr(lock, kind)(step["phase"]):
                    if "touch" in step:
                        Path(step["touch"]).write_text(repr(time.monotonic()))
                    time.sleep(step.get("hold", 0.0))
                    run(step.get("inner", []))

    run(plan)
    print(json.dumps({"waited_s": lock.waited_s}))
    """
)


Spawn = Callable[[Path, Path, str, list[dict]], subprocess.Popen]


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    """Starts fake workers (lock file, timeline, label, plan); kills any still running at the end,
    so a failed test (a deadlock, say) leaves no process hanging on the lock."""
    script = tmp_path / "fake_worker.py"
    script.write_text(WORKER)
    started: list[subprocess.Popen] = []

    def start(lock_file: Path, timeline: Path, label: str, plan: list[dict]) -> subprocess.Popen:
        process = subprocess.Popen(
            [sys.executable, str(script), gpu_lock.__file__, str(lock_file), str(timeline), label, json.dumps(plan)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def finish(process: subprocess.Popen, timeout: float = 15.0) -> dict:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err
    return json.loads(out)


def wait_for(path: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.005)


def can_lock(path: Path | str, operation: int) -> bool:
    """Whether a fresh open file description could take `operation` now (i.e. what another process sees)."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # drops the probe's lock, if it got one


def by_label(spans: list[Span]) -> dict[str, list[Span]]:
    grouped: dict[str, list[Span]] = {}
    for span in spans:
        grouped.setdefault(span.label, []).append(span)
    return grouped


# -- across processes ----------------------------------------------------------------------------


def test_candidates_share_correctness_and_time_alone(tmp_path: Path, spawn: Spawn) -> None:
    lock_file, timeline, go = tmp_path / "gpu.lock", tmp_path / "timeline.jsonl", tmp_path / "go"
    plan = lambda name: [  # noqa: E731
        {"do": "touch", "path": str(tmp_path / f"ready-{name}")},
        {"do": "wait_file", "path": str(go)},  # start barrier: all four contend
        {"do": "shared", "phase": "compile", "hold": 0.3},
        {"do": "shared", "phase": "correctness", "hold": 0.3},
        {"do": "exclusive", "phase": "timing", "hold": 0.2},
    ]
    names = [f"candidate-{k}" for k in range(4)]
    workers = [spawn(lock_file, timeline, name, plan(name)) for name in names]
    for name in names:
        wait_for(tmp_path / f"ready-{name}")
    go.touch()
    waits = [finish(worker)["waited_s"] for worker in workers]

    spans = read_timeline(timeline)
    assert exclusive_overlaps(spans) == []
    assert concurrency(spans, "shared") >= 2
    assert concurrency(spans, "exclusive") == 1
    grouped = by_label(spans)
    assert sorted(grouped) == names
    for name in names:
        assert [(s.phase, s.mode) for s in grouped[name]] == [
            ("compile", "shared"), ("correctness", "shared"), ("timing", "exclusive")]
        assert all(s.released and s.end > s.start for s in grouped[name])
    timings = sorted((s for s in spans if s.mode == "exclusive"), key=lambda s: s.start)
    assert all(a.end <= b.start for a, b in zip(timings, timings[1:]))  # one after another
    assert sum(waits) >= 0.2 * 3 * 0.9  # the timings queued: at least three of them waited a turn
    print("\n" + render_timeline(spans, width=80))


def test_waiting_exclusive_holds_back_later_shared(tmp_path: Path, spawn: Spawn) -> None:
    lock_file, timeline = tmp_path / "gpu.lock", tmp_path / "timeline.jsonl"
    held, requesting, asked = tmp_path / "held", tmp_path / "requesting", tmp_path / "asked"
    # the holder holds until the late request has come: no sleep decides the order
    holder = spawn(lock_file, timeline, "holder", [{"do": "shared", "phase": "correctness", "touch": str(held),
                                                    "inner": [{"do": "wait_file", "path": str(asked)}]}])
    wait_for(held)
    timer = spawn(lock_file, timeline, "timer", [
        {"do": "touch", "path": str(requesting)},
        {"do": "exclusive", "phase": "timing", "hold": 0.05},
    ])
    wait_for(requesting)
    turnstile = str(lock_file) + ".turnstile"
    while can_lock(turnstile, fcntl.LOCK_EX):  # the exclusive request waits holding the turnstile
        assert timer.poll() is None, "the exclusive request never came"
        time.sleep(0.005)
    late = spawn(lock_file, timeline, "late", [
        {"do": "touch", "path": str(asked)},
        {"do": "shared", "phase": "compile", "hold": 0.05},
    ])
    for process in (holder, timer, late):
        finish(process)

    spans = {span.label: span for span in read_timeline(timeline)}
    asked_at = float(asked.read_text())
    assert asked_at < spans["holder"].end  # the shared request came while shared was held ...
    assert spans["timer"].start >= spans["holder"].end
    assert spans["late"].start >= spans["timer"].end  # ... and still waited for the exclusive one
    assert exclusive_overlaps(list(spans.values())) == []


@pytest.mark.timeout(30)
def test_killed_exclusive_holder_blocks_no_one(tmp_path: Path, spawn: Spawn) -> None:
    lock_file, timeline, held = tmp_path / "gpu.lock", tmp_path / "timeline.jsonl", tmp_path / "held"
    victim = spawn(lock_file, timeline, "victim",
                   [{"do": "exclusive", "phase": "timing", "hold": 60.0, "touch": str(held)}])
    wait_for(held)
    asking = tmp_path / "asking"
    queued = spawn(lock_file, timeline, "queued", [{"do": "touch", "path": str(asking)},
                                                    {"do": "shared", "phase": "compile", "hold": 0.05}])
    wait_for(asking)  # the shared request comes while the holder holds (it may still be on its way to queue)
    assert not can_lock(lock_file, fcntl.LOCK_SH)
    assert not can_lock(str(lock_file) + ".turnstile", fcntl.LOCK_EX)

    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(timeout=5)
    assert victim.returncode == -signal.SIGKILL
    lock = GpuLock(lock_file, timeline=timeline, label="next")
    # the victim would have held for 60 s: getting the lock at all, under the test's 30 s timeout, shows the
    # kernel dropped its flocks at the kill (no wall-clock bound on how fast)
    with lock.exclusive("timing"):
        assert not can_lock(lock_file, fcntl.LOCK_SH)  # ours now, and exclusive
    finish(queued, timeout=5)

    spans = by_label(read_timeline(timeline))
    [dead] = spans["victim"]
    assert (dead.mode, dead.released) == ("exclusive", False)
    assert dead.end == max(s.end for group in spans.values() for s in group)  # ends at the file's last time
    assert spans["next"][0].released and spans["queued"][0].released
    # a killed holder's span runs to the end of the file, so it "overlaps" whatever followed the kill
    assert {b.label for a, b in exclusive_overlaps(read_timeline(timeline))} == {"next", "queued"}


def test_two_shared_holders_upgrading_at_once_do_not_deadlock(tmp_path: Path, spawn: Spawn) -> None:
    lock_file, timeline, go = tmp_path / "gpu.lock", tmp_path / "timeline.jsonl", tmp_path / "go"
    plan = [{"do": "wait_file", "path": str(go)},
            {"do": "shared", "phase": "evaluate", "hold": 0.2,
             "inner": [{"do": "exclusive", "phase": "timing", "hold": 0.2}, {"do": "sleep", "s": 0.1}]}]
    workers = [spawn(lock_file, timeline, name, plan) for name in ("a", "b")]
    time.sleep(0.1)
    go.touch()
    for worker in workers:
        finish(worker, timeout=10)  # keeping the shared hold while asking for exclusive would hang here
    spans = read_timeline(timeline)
    assert exclusive_overlaps(spans) == []
    for name in ("a", "b"):
        assert [(s.phase, s.mode) for s in by_label(spans)[name]] == [
            ("evaluate", "shared"), ("timing", "exclusive"), ("evaluate", "shared")]


# -- within one process --------------------------------------------------------------------------


def test_nesting_and_upgrade(tmp_path: Path) -> None:
    lock_file, timeline = tmp_path / "gpu.lock", tmp_path / "timeline.jsonl"
    turnstile = str(lock_file) + ".turnstile"
    lock = GpuLock(lock_file, timeline=timeline, label="me")
    assert Path(turnstile).exists() and lock.held is None

    def looks_shared() -> bool:  # as another process sees it
        return can_lock(lock_file, fcntl.LOCK_SH) and not can_lock(lock_file, fcntl.LOCK_EX) \
            and can_lock(turnstile, fcntl.LOCK_EX)

    def looks_exclusive() -> bool:
        return not can_lock(lock_file, fcntl.LOCK_SH) and not can_lock(turnstile, fcntl.LOCK_EX)

    with lock.shared("compile"):
        assert lock.held == "shared" and looks_shared()
        with lock.shared("inner"):  # counted, nothing taken
            assert looks_shared()
            with lock.exclusive("timing"):  # upgrade from depth 2
                assert lock.held == "exclusive" and looks_exclusive()
                with lock.shared("covered"), lock.exclusive("again"):
                    assert looks_exclusive()
                assert looks_exclusive()
            assert lock.held == "shared" and looks_shared()
        assert looks_shared()
        with pytest.raises(RuntimeError):
            with lock.exclusive("boom"):
                raise RuntimeError("a failed timing")
        assert lock.held == "shared" and looks_shared()
    assert lock.held is None and can_lock(lock_file, fcntl.LOCK_EX) and can_lock(turnstile, fcntl.LOCK_EX)

    events = [json.loads(line) for line in timeline.read_text().splitlines()]
    assert [(e["event"], e["mode"], e["phase"]) for e in events] == [
        ("acquire", "shared", "compile"), ("release", "shared", "compile"),
        ("acquire", "exclusive", "timing"), ("release", "exclusive", "timing"),
        ("acquire", "shared", "compile"), ("release", "shared", "compile"),
        ("acquire", "exclusive", "boom"), ("release", "exclusive", "boom"),
        ("acquire", "shared", "compile"), ("release", "shared", "compile"),
    ]
    assert all(e["pid"] == os.getpid() and e["label"] == "me" for e in events)
    times = [e["t"] for e in events]
    assert times == sorted(times)
    assert [s.mode for s in read_timeline(timeline)] == ["shared", "exclusive", "shared", "exclusive", "shared"]
    assert lock.waited_s >= 0.0
    lock.close()


def test_off_gpu_gives_up_a_shared_hold_and_takes_it_back(tmp_path: Path) -> None:
    lock_file, timeline = tmp_path / "gpu.lock", tmp_path / "timeline.jsonl"
    lock = GpuLock(lock_file, timeline=timeline, label="me")
    with lock.off_gpu("compile"):  # nothing held: nothing to give up
        assert lock.held is None
    with lock.shared("run"), lock.shared("inner"):
        with lock.off_gpu("compile"):
            assert lock.held is None and can_lock(lock_file, fcntl.LOCK_EX)  # a timing could run now
        assert lock.held == "shared" and not can_lock(lock_file, fcntl.LOCK_EX)
        with lock.exclusive("timing"), lock.off_gpu("compile"):  # a timing keeps the GPU
            assert lock.held == "exclusive" and not can_lock(lock_file, fcntl.LOCK_SH)
    assert lock.held is None and can_lock(lock_file, fcntl.LOCK_EX)
    assert [(s.phase, s.mode) for s in read_timeline(timeline)] == [
        ("run", "shared"), ("run", "shared"), ("timing", "exclusive"), ("run", "shared")]
    with NoLock().off_gpu("compile"):
        pass
    lock.close()


def test_two_objects_in_one_process_contend(tmp_path: Path) -> None:
    """A flock belongs to an open file description, so each object is its own holder."""
    lock_file = tmp_path / "gpu.lock"
    first, second = GpuLock(lock_file), GpuLock(lock_file)
    with first.shared("a"), second.shared("b"):
        assert not can_lock(lock_file, fcntl.LOCK_EX)
    with first.exclusive("t"):
        assert not can_lock(lock_file, fcntl.LOCK_SH)
    with second.exclusive("t"):  # first released it
        pass
    first.close()
    second.close()


# -- environment and paths -----------------------------------------------------------------------


def test_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_LOCK, raising=False)
    monkeypatch.delenv(ENV_TIMELINE, raising=False)
    assert from_environment("cpu-worker") is None
    monkeypatch.setenv(ENV_LOCK, str(tmp_path / "gpu.lock"))
    lock = from_environment("candidate-3")
    assert lock is not None
    assert (lock.path, lock.timeline, lock.label) == (str(tmp_path / "gpu.lock"), None, "candidate-3")
    assert (tmp_path / "gpu.lock").exists()
    monkeypatch.setenv(ENV_TIMELINE, str(tmp_path / "timeline.jsonl"))
    lock = from_environment()
    assert lock is not None and lock.timeline == str(tmp_path / "timeline.jsonl")
    with lock.shared("context"):
        pass
    assert [s.phase for s in read_timeline(tmp_path / "timeline.jsonl")] == ["context"]


def test_process_lock_is_the_assigned_lock_or_one_that_holds_nothing(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_LOCK, raising=False)
    none = process_lock("cpu-worker")
    assert isinstance(none, NoLock)
    with none.shared("compile"), none.exclusive("timing"):  # the same phases, nothing held
        pass
    monkeypatch.setenv(ENV_LOCK, str(tmp_path / "gpu.lock"))
    monkeypatch.setenv(ENV_TIMELINE, str(tmp_path / "timeline.jsonl"))
    lock = process_lock("candidate")
    assert isinstance(lock, GpuLock) and lock.label == "candidate"
    with lock.exclusive("timing"):
        pass
    assert [(s.phase, s.mode) for s in read_timeline(tmp_path / "timeline.jsonl")] == [("timing", "exclusive")]


def test_thread_locks_give_each_thread_its_own_holder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The judge's threads: each holds the GPU on its own object, so one thread's release is not another's,
    and a timing (another process's exclusive) waits for every thread's hold."""
    import threading

    monkeypatch.setenv(ENV_LOCK, str(tmp_path / "gpu.lock"))
    monkeypatch.delenv(ENV_TIMELINE, raising=False)
    locks = ThreadLocks("judge")
    first_in, second_out = threading.Event(), threading.Event()
    seen = {}

    def other() -> None:
        with locks.shared("fill"):
            seen["other"] = locks.current()
            first_in.wait(5)
        second_out.set()

    thread = threading.Thread(target=other)
    thread.start()
    with locks.shared("compare"):
        first_in.set()
        second_out.wait(5)  # the other thread has released its hold; this one's stays
        assert not can_lock(tmp_path / "gpu.lock", fcntl.LOCK_EX)
    thread.join()
    assert can_lock(tmp_path / "gpu.lock", fcntl.LOCK_EX)
    assert isinstance(locks.current(), GpuLock) and seen["other"] is not locks.current()
    monkeypatch.delenv(ENV_LOCK)
    assert isinstance(ThreadLocks().current(), NoLock)  # a CPU process: holds nothing, from any thread


def test_lock_path_is_per_device_and_user() -> None:
    path = lock_path("cuda:0")
    assert path == os.path.join(tempfile.gettempdir(), f"kfoundry-{os.getuid()}-cuda-0.gpu.lock")
    assert lock_path("cuda:1") != path
    assert os.path.dirname(lock_path("../../etc/x")) == tempfile.gettempdir()


# -- the timeline helpers ------------------------------------------------------------------------


def test_overlaps_and_concurrency_on_known_spans() -> None:
    spans = [
        Span(1, "a", "compile", "shared", 0.0, 2.0),
        Span(2, "b", "compile", "shared", 1.0, 3.0),
        Span(3, "c", "compile", "shared", 1.5, 2.5),
        Span(1, "a", "timing", "exclusive", 3.0, 4.0),  # touches b's end: no overlap
        Span(2, "b", "timing", "exclusive", 3.5, 5.0),  # overlaps a's timing: reported once
    ]
    assert concurrency(spans, "shared") == 3
    assert concurrency(spans, "exclusive") == 2
    assert concurrency([], "shared") == 0
    assert [(a.pid, b.pid, b.phase) for a, b in exclusive_overlaps(spans)] == [(1, 2, "timing")]
    same_process = [Span(1, "a", "compile", "shared", 0.0, 2.0), Span(1, "a", "timing", "exclusive", 0.5, 1.0)]
    assert exclusive_overlaps(same_process) == []


def test_read_timeline_skips_a_torn_line(tmp_path: Path) -> None:
    timeline = tmp_path / "timeline.jsonl"
    lines = [
        {"pid": 7, "label": "x", "phase": "p", "mode": "shared", "event": "acquire", "t": 10.0},
        {"pid": 7, "label": "x", "phase": "p", "mode": "shared", "event": "release", "t": 11.0},
    ]
    timeline.write_text("\n".join(json.dumps(line) for line in lines) + '\n{"pid": 8, "lab')
    assert read_timeline(timeline) == [Span(7, "x", "p", "shared", 10.0, 11.0)]


def test_render_timeline_one_row_per_process() -> None:
    spans = [
        Span(10, "reference", "context", "shared", 0.0, 1.0),
        Span(11, "candidate-0", "correctness", "shared", 0.5, 1.5),
        Span(11, "candidate-0", "timing", "exclusive", 1.5, 2.0),
        Span(12, "baseline", "timing", "exclusive", 2.0, 3.0),
    ]
    chart = render_timeline(spans, width=30)
    rows = [line for line in chart.splitlines() if line.split()[0].isdigit()]
    assert [row.split()[:2] for row in rows] == [["10", "reference"], ["11", "candidate-0"], ["12", "baseline"]]
    bars = {row.split()[0]: row.split("|")[1] for row in rows}
    assert all(len(bar) == 30 for bar in bars.values())
    assert set(bars["10"]) == {"=", " "} and bars["10"].startswith("=")
    assert "=" in bars["11"] and "#" in bars["11"]
    assert set(bars["12"]) == {"#", " "} and bars["12"].endswith("#")
    assert bars["12"].index("#") >= bars["11"].rindex("#")  # the axis is common
    assert render_timeline([]) == "(no GPU lock spans)"
