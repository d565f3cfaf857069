import io
import re
import threading
import time

from kfoundry.phase_log import PhaseLog, is_terminal

LINE = re.compile(r"^\[ *\d+\.\d s\] \S.*$")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_line_per_phase_change_and_none_for_a_repeated_phase():
    out, clock = io.StringIO(), Clock()
    log = PhaseLog(out, clock=clock)
    log.phase("reference: expected outputs")
    clock.now += 12.34
    log.phase("reference: expected outputs")
    log.phase("candidate: compile")
    log.note("a note")
    log.phase("candidate: compile")  # the note left the phase as it was
    assert out.getvalue().splitlines() == [
        "[    0.0 s] reference: expected outputs",
        "[   12.3 s] candidate: compile",
        "[   12.3 s] a note",
    ]
    assert log.current == "candidate: compile"


def test_the_heartbeat_names_the_current_phase_during_a_silence():
    out = io.StringIO()
    with PhaseLog(out, heartbeat_s=0.2) as log:
        log.phase("timing")
        time.sleep(0.55)
    beats = [line for line in out.getvalue().splitlines() if "still working" in line]
    assert 1 <= len(beats) <= 3, out.getvalue()
    assert all(line.endswith("] still working: timing") and LINE.match(line) for line in beats)


def test_no_heartbeat_while_lines_keep_coming():
    out = io.StringIO()
    with PhaseLog(out, heartbeat_s=0.2) as log:
        for i in range(12):
            log.phase(f"step {i}")
            time.sleep(0.05)
    assert "still working" not in out.getvalue()
    assert len(out.getvalue().splitlines()) == 12


def test_the_heartbeat_says_what_describe_says():
    out = io.StringIO()
    with PhaseLog(out, heartbeat_s=0.2, describe=lambda: "generation 2;\nevaluations 5 / 10") as log:
        log.phase("searching")
        time.sleep(0.35)
    assert "still working: generation 2; evaluations 5 / 10" in out.getvalue()


def test_stop_returns_at_once():
    log = PhaseLog(io.StringIO(), heartbeat_s=30.0).start()
    started = time.monotonic()
    log.stop()
    assert time.monotonic() - started < 0.5
    assert log.start() is log  # it starts again after a stop
    log.stop()


def test_lines_from_several_threads_stay_whole():
    out = io.StringIO()
    log = PhaseLog(out, heartbeat_s=0)

    def work(name: str) -> None:
        for i in range(200):
            log.phase(f"{name} phase {i}")

    threads = [threading.Thread(target=work, args=(f"worker{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = out.getvalue().splitlines()
    assert len(lines) == 800 and all(LINE.match(line) for line in lines)


def test_a_closed_stream_does_not_raise():
    out = io.StringIO()
    out.close()
    PhaseLog(out).phase("anything")


def test_is_terminal():
    class Tty:
        def isatty(self) -> bool:
            return True

    class Broken:
        def isatty(self) -> bool:
            raise ValueError("I/O operation on closed file")

    assert is_terminal(Tty())
    assert not is_terminal(io.StringIO()) and not is_terminal(Broken()) and not is_terminal(object())
