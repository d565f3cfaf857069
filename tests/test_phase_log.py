"""PhaseLog: its lines, and its heartbeat on a clock the test moves (no test here sleeps or times anything:
the heartbeat thread's own reads of the clock say when it has looked)."""

import io
import re
import threading

from kfoundry.phase_log import PhaseLog, is_terminal
from tests.helpers import ManualClock, Output

LINE = re.compile(r"^\[ *\d+\.\d s\] \S.*$")


def test_a_line_per_phase_change_and_none_for_a_repeated_phase():
    out, clock = io.StringIO(), ManualClock()
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
    out, clock = Output(), ManualClock()
    with PhaseLog(out, heartbeat_s=0.2, clock=clock) as log:
        log.phase("timing")
        clock.wait_for_reads(2)  # the heartbeat has looked, twice: no silence of a heartbeat's length yet
        assert "still working" not in out.getvalue()
        clock.now += 0.2  # a heartbeat of silence
        out.wait_for("still working")
        clock.wait_for_reads(2)  # it looks again, with the clock where it was: no second line
        assert out.getvalue().count("still working") == 1
        clock.now += 0.3  # more than another heartbeat of silence since that line
        out.wait_for("still working", times=2)
    lines = out.getvalue().splitlines()
    assert lines == ["[    0.0 s] timing", "[    0.2 s] still working: timing", "[    0.5 s] still working: timing"]
    assert all(LINE.match(line) for line in lines)


def test_no_heartbeat_while_lines_keep_coming():
    out, clock = Output(), ManualClock()
    with PhaseLog(out, heartbeat_s=0.2, clock=clock) as log:
        for i in range(12):  # 1.8 s in all, never 0.2 s without a line
            log.phase(f"step {i}")
            clock.now += 0.15
            clock.wait_for_reads(2)  # the heartbeat has looked at the silence since this line
    assert "still working" not in out.getvalue()
    assert len(out.getvalue().splitlines()) == 12


def test_the_heartbeat_says_what_describe_says():
    out, clock = Output(), ManualClock()
    with PhaseLog(out, heartbeat_s=0.2, clock=clock, describe=lambda: "generation 2;\nevaluations 5 / 10") as log:
        log.phase("searching")
        clock.now += 0.2
        out.wait_for("still working")
    assert "still working: generation 2; evaluations 5 / 10" in out.getvalue()


def test_stop_returns_at_once():
    log = PhaseLog(io.StringIO(), heartbeat_s=30.0).start()
    beating = log._thread
    assert beating is not None and beating.is_alive()
    log.stop()
    # woken from its 30 s wait: stop()'s join (5 s at most) did not return with the thread still waiting
    assert not beating.is_alive() and log._thread is None
    assert log.start() is log  # it starts again after a stop
    assert log._thread is not None and log._thread.is_alive() and log._thread is not beating
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
