import io

from rich.console import Console

from kfoundry.optimize.progress import ProgressView


def _view(quiet, timed=True):
    out = io.StringIO()
    return ProgressView(quiet=quiet, timed=timed, max_evals=10, max_time_s=60, max_cost=1.0,
                        console=Console(file=out, width=120, force_terminal=False)), out


def test_the_panel_shows_the_figures_and_notable_events_get_a_line():
    view, out = _view(quiet=False)
    with view:
        view.event({"event": "proposed", "id": "3", "expert": "tuner", "generation": 1}, 0.0)
        view.event({"event": "evaluated", "id": "3", "expert": "tuner", "status": "ok", "generation": 1}, 0.01)
        view.event({"event": "best", "id": "3", "fitness": 1.8, "generation": 1}, 0.01)
        view.event({"event": "evaluated", "id": "4", "expert": "memory", "status": "wrong_output",
                    "generation": 1}, 0.02)
    text = out.getvalue()
    assert "new best, candidate 3 (1.8x over eager)" in text
    assert "2 / 10" in text and "50%" in text and "1.8x vs eager" in text and "$0.0200" in text


def test_untimed_runs_say_correct_and_quiet_prints_nothing():
    view, out = _view(quiet=False, timed=False)
    with view:
        view.event({"event": "best", "id": "1", "fitness": 1.0, "generation": 0}, 0.0)
    assert "candidate 1 (correct)" in out.getvalue() and "CPU: not timed" in out.getvalue()
    quiet, out = _view(quiet=True)
    with quiet:
        quiet.event({"event": "best", "id": "1", "fitness": 2.0, "generation": 0}, 0.0)
        quiet.note("hello")
    assert out.getvalue() == ""
