import functools
import io
import threading
import time
import types

from rich.console import Console

from kfoundry.optimize import progress
from kfoundry.optimize.progress import ProgressView
from tests.helpers import WAIT_S, ManualClock, Output


def _view(quiet, timed=True, terminal=True, heartbeat_s=30.0, out=None):
    out = io.StringIO() if out is None else out
    console = Console(file=out, width=120, force_terminal=terminal, color_system=None)
    return ProgressView(quiet=quiet, timed=timed, max_evals=10, max_time_s=60, max_cost=1.0, console=console,
                        heartbeat_s=heartbeat_s), out


def _two_evaluations(view):
    view.event({"event": "proposed", "id": "3", "expert": "tuner", "generation": 1}, 0.0)
    view.event({"event": "evaluated", "id": "3", "expert": "tuner", "status": "ok", "fitness": 1.8,
                "generation": 1}, 0.01)
    view.event({"event": "best", "id": "3", "fitness": 1.8, "generation": 1}, 0.01)
    view.event({"event": "evaluated", "id": "4", "expert": "memory", "status": "wrong_output",
                "generation": 1}, 0.02)


def test_the_panel_shows_the_figures_and_notable_events_get_a_line():
    view, out = _view(quiet=False)
    with view:
        _two_evaluations(view)
    text = out.getvalue()
    assert "new best, candidate 3 (1.8x over eager)" in text
    assert "2 / 10" in text and "50%" in text and "1.8x vs eager" in text and "$0.0200" in text
    assert "8 evals, " in text  # budget left: evaluations, then seconds and dollars
    assert "[" not in text.replace("\x1b[", "")  # no timestamped log lines on a terminal


def test_a_reseeded_island_gets_a_line():
    view, out = _view(quiet=False)
    with view:
        view.event({"event": "reseeded", "islands": [[1, "7", ["2", "5"]], [3, "7", ["4"]]], "generation": 2}, 0.0)
    assert "island(s) 1, 3 far behind the best, reseeded from it" in out.getvalue()


def test_the_panel_is_recomputed_between_events(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(progress, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    view, out = _view(quiet=False)
    test_thread, redrawn, shown = threading.current_thread(), threading.Condition(), []
    panel = view._panel

    def watched_panel():  # what the live display draws, noted where its own refresher (not an event) drew it
        table = panel()
        if threading.current_thread() is not test_thread:
            with redrawn:
                shown.append(view._figures()["elapsed"])
                redrawn.notify_all()
        return table

    monkeypatch.setattr(view, "_panel", watched_panel)
    with view:
        now[0] += 1000.0  # time passing, with no event to announce it
        with redrawn:  # twice: the first of those drawings has reached the output by the second
            assert redrawn.wait_for(lambda: shown.count("1000 s") >= 2, timeout=WAIT_S), shown
        during = out.getvalue()
    assert "1000 s" in during


def test_without_a_terminal_phases_and_candidates_are_log_lines_with_a_heartbeat(monkeypatch):
    clock = ManualClock()
    monkeypatch.setattr(progress, "PhaseLog", functools.partial(progress.PhaseLog, clock=clock))
    view, out = _view(quiet=False, terminal=False, heartbeat_s=0.2, out=Output())
    with view:
        view.status("reference: expected outputs")
        view.status("reference: expected outputs")
        view.note("a note")
        _two_evaluations(view)
        clock.now += 0.2  # a heartbeat of silence
        out.wait_for("still working")
    lines = out.getvalue().splitlines()
    assert "\x1b" not in out.getvalue()
    said = [line.split("] ", 1)[1] for line in lines]
    assert said[:5] == ["reference: expected outputs", "a note", "candidate 3 (tuner): ok, 1.8x",
                        "generation 1: new best, candidate 3 (1.8x over eager)", "candidate 4 (memory): wrong_output"]
    beat = next(line for line in said if line.startswith("still working: "))
    assert beat.startswith("still working: generation 1; evaluations 2 / 10; correct 50%; best 1.8x vs eager; ")
    assert "budget left 8 evals, " in beat and beat.endswith("now: candidate 4 (memory): wrong_output")
    assert said[-1].startswith("summary: generation 1; evaluations 2 / 10")


def test_untimed_runs_say_correct_and_quiet_prints_nothing():
    view, out = _view(quiet=False, timed=False)
    with view:
        view.event({"event": "evaluated", "id": "1", "expert": "seed", "status": "ok", "fitness": 1.0,
                    "generation": 0}, 0.0)
        view.event({"event": "best", "id": "1", "fitness": 1.0, "generation": 0}, 0.0)
    assert "candidate 1 (correct)" in out.getvalue() and "CPU: not timed" in out.getvalue()
    assert "1x" not in out.getvalue()
    for terminal in (True, False):
        quiet, out = _view(quiet=True, terminal=terminal, heartbeat_s=0.1)
        with quiet:
            quiet.status("reference")
            quiet.event({"event": "best", "id": "1", "fitness": 2.0, "generation": 0}, 0.0)
            quiet.note("hello")
            time.sleep(0.25)
        assert out.getvalue() == ""


def test_an_unpriced_llm_call_reads_unknown_in_the_panel_and_the_log():
    for terminal in (True, False):
        view, out = _view(quiet=False, terminal=terminal)
        with view:
            view.event({"event": "evaluated", "id": "1", "expert": "memory", "status": "ok", "fitness": 1.2,
                        "generation": 0}, None, 1)
        text = out.getvalue()
        assert "unknown (1 unpriced call)" in text and "$0.0000" not in text
        assert "$1.00" in text  # budget left: an unknown cost is not spent money


def test_time_left_is_estimated_from_the_pace_of_the_evaluations(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(progress, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    view = progress.ProgressView(quiet=True, timed=True, max_evals=10, max_time_s=None, max_cost=None)
    assert view._figures()["time left"] == "-"  # nothing to go by yet
    now[0] += 30.0  # the reference's preparation: not the search's pace
    view.event({"event": "proposed", "id": "1", "expert": "tuner", "generation": 0}, 0.0)
    now[0] += 20.0
    view.event({"event": "evaluated", "id": "1", "expert": "tuner", "status": "ok", "generation": 0}, 0.0)
    view.event({"event": "evaluated", "id": "2", "expert": "tuner", "status": "ok", "generation": 0}, 0.0)
    figures = view._figures()
    assert figures["budget left"] == "8 evals" and figures["elapsed"] == "50 s"
    assert figures["time left"] == "~80 s"  # 10 s an evaluation, 8 to go
    view.max_time_s = 110.0  # --max-time comes first: 60 s of it left
    assert view._figures()["time left"] == "~60 s"
    now[0] += 10.0  # the clock moves without an event
    assert view._figures()["elapsed"] == "60 s"
