"""The programmatic suite: `kfoundry optimize --llm none` with a fixed budget, against eager and torch.compile.

Every problem of benchmarks/suite/ gets a search with no LLM (the composer and the tuner alone) and a fixed number
of evaluations; then one table: eager, torch.compile and our times, both speedups, the evaluations used, whether
the best held when its run judged it at other sizes, and the summary the issue asks for (the correct fraction of
the suite, our geomean speedup over eager against torch.compile's on the same problems, and over all problems).

It runs `kfoundry bench SUITE --method optimize` through the Python API (kfoundry.bench.runner.run_bench with a
RunConfig built here, whose search has no LLM specs): that is what `--llm none` means, no provider is built whatever
KFOUNDRY_LLM or kfoundry.toml say. The searches use their own experience library (default: a fresh one in the
bench directory, so no best kernel of an earlier session seeds them; `--library user` takes the shared one).

Where our search found no correct kernel its run has no eager / torch.compile time; a reference pass (the
problem's Model judged against itself, `--method reference`, into OUT/baselines/) fills those in on a GPU. It reads
the baselines from the on-disk cache the searches filled: the searches' own measurement (a GPU of --devices that
had not run that problem measures it anew, in the same session).

    python benchmarks/programmatic_suite.py [--max-evals 16] [--time-per-problem S] [--problems 1-9,12]
        [--out DIR] [--resume] [--device D | --devices cuda:0,cuda:1|all] [--set NAME=VALUE ...]
        [--trials N] [--timing-trials N] [--timeout S] [--baselines eager,compile,...] [--no-cache] [--library PATH|user|off]
        [--fill-baselines auto|on|off] [--confirm-gain auto|on|off] [--json PATH] [--report-only [--also DIR ...]]
        [--verbose]

With --confirm-gain (auto: on a GPU), each correct problem's generation-0 best and final best are timed again after
its search, one after the other by one evaluator with nothing else in flight (kfoundry.bench.confirm), into
OUT/confirm/; the search's goal counts that ratio where it was measured. Why: on one H100, 11 generation-0 bests timed
0-36% faster alone than the search had timed them, while their finals agreed within 1-5%.

With --report-only, --problems picks the rows from every result bench.json holds, also those an earlier
call with another selection finished.

A second table follows the search's course per problem (generation 0's best, the final best, the experts whose
candidates raised it), the best's fraction of the roofline and of the 3xTF32 roof (three TF32 products per FLOP: what
an fp32 GEMM exact to fp32 can reach on tensor cores) at the run's measured ceilings and at the datasheet's, and,
with --baselines ...,compile-max-autotune-no-cudagraphs, that mode's time where it compiled in under 60 s, and with
...,compile-reduce-overhead, torch.compile's CUDA-graph mode (the like-for-like baseline of a graph variant). It
gives each problem's floor too (kfoundry.bench.floor: the speed of light at the precision the kernel must honour,
the roof that sets it) and the fraction of it ours, eager and torch.compile reach, with their geomeans.

Prints the tables and the summary (labelled with device, versions, trials, statistic) and writes JSON to
benchmarks/results/programmatic_suite-<UTC stamp>.json. On CPU nothing is timed (Triton's interpreter): every
time and speedup reads n/a, and only correctness means anything. Exit code 0 when the bench ran (whatever the
verdicts), 2 for bad usage, 130 when interrupted (run again with --resume).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import statistics
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from kfoundry.bench.figures import FLOOR_MEANING, FLOOR_NAMES, floor_text, of_floor_text  # noqa: E402
from kfoundry.bench.confirm import read_confirmations  # noqa: E402
from kfoundry.bench.floor import Floor, floor_fields, speed_of_light  # noqa: E402
from kfoundry.bench.metrics import floor_metrics  # noqa: E402
from kfoundry.runs.credit import move_text  # noqa: E402

DEFAULT_SUITE = ROOT / "benchmarks" / "suite"
DEFAULT_OUT = ROOT / "kfoundry-runs" / "programmatic_suite"  # kfoundry-runs/ is ignored by git
RESULTS_DIR = ROOT / "benchmarks" / "results"
DEFAULT_MAX_EVALS = 16
FORMAT = "kfoundry-programmatic-suite/1"
BASELINES_DIR = "baselines"  # OUT/baselines/: the reference pass
CORRECT_TARGET = 0.9  # the bar: a correct kernel for at least 90% of the suite
MIN_REFERENCE_MS = 0.5  # the realistic sizes: each reference at least this long on the H200
UNJUDGED = ("problem_error",)
AUTOTUNE = "compile-max-autotune-no-cudagraphs"  # the third baseline, with --baselines
GRAPHS = "compile-reduce-overhead"  # torch.compile with CUDA graphs: a graph variant's like-for-like baseline
AUTOTUNE_COMPILE_LIMIT_S = 60.0  # the bar: its time counts only where it compiled in under this  # the reference itself failed: nothing to judge a method by
NA = "n/a"
NONE = "-"


# -- rows and summary: pure functions of bench.json records ----------------------------------------

def _number(value: Any) -> float | None:
    """A positive finite float, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and value > 0 else None


def geomean(values: Iterable[float]) -> float | None:
    values = list(values)
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def build_rows(problems: Sequence[dict[str, Any]], baselines: dict[str, dict[str, Any]] | None = None,
               extras: dict[str, dict[str, Any]] | None = None,
               confirmations: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One row per problem of an optimize bench (its bench.json `problems`).

    `baselines`: problem name -> the reference pass's record for it (its eager_ms and compile_ms fill in a
    problem whose search left none); `extras`: problem name -> figures from its run's result.json
    (llm_calls, stop_reason); `confirmations`: problem name -> its kfoundry.bench.confirm.Confirmation
    (--confirm-gain: generation 0's best and the final best timed again, one after the other)."""
    baselines, extras, confirmations = baselines or {}, extras or {}, confirmations or {}
    rows = []
    for p in problems:
        name = p["name"]
        correct = p.get("status") == "ok"
        eager_ms, compile_ms = _number(p.get("eager_ms")), _number(p.get("compile_ms"))
        source = "optimize" if eager_ms is not None else None
        filled = baselines.get(name)
        if eager_ms is None and filled is not None and _number(filled.get("eager_ms")) is not None:
            eager_ms, compile_ms = _number(filled.get("eager_ms")), _number(filled.get("compile_ms"))
            source = "reference pass"
        speedup_eager = _number(p.get("speedup_eager")) if correct else None
        speedup_compile = _number(p.get("speedup_compile")) if correct else None
        extra = extras.get(name, {})
        ours_ms = _number(p.get("runtime_ms")) if correct else None
        # the bench's record of the floor, else the reference pass's, else one from the run (an older bench.json)
        floor = Floor.from_fields(p) or Floor.from_fields(filled or {}) or extra.get("floor")
        autotune_ms, autotune_s = extra.get("autotune_ms"), extra.get("autotune_compile_s")
        autotune_counts = autotune_ms is not None and (autotune_s is None or autotune_s < AUTOTUNE_COMPILE_LIMIT_S)
        gen0, final = extra.get("gen0_speedup"), extra.get("final_speedup")
        rows.append({
            "number": p.get("number"),
            "name": name,
            "status": p.get("status"),
            "correct": correct,
            "judged": p.get("status") not in UNJUDGED,
            "eager_ms": eager_ms,
            "compile_ms": compile_ms,
            "ours_ms": ours_ms,
            "speedup_eager": speedup_eager,
            "speedup_compile": speedup_compile,
            "compile_vs_eager": eager_ms / compile_ms if eager_ms is not None and compile_ms is not None else None,
            "evaluations": p.get("evaluations"),
            "baseline_source": source,
            "llm_calls": extra.get("llm_calls"),
            "stop_reason": extra.get("stop_reason"),
            "gen0_speedup": gen0,
            "final_speedup": final,
            "search_gain": final / gen0 if gen0 and final else None,
            "confirmed_gain": confirmations[name].gain if correct and name in confirmations else None,
            "confirmation": confirmations[name].to_dict() if correct and name in confirmations else None,
            # generation 0's best against the floor: where the search's goal (issue 41) applies
            "gen0_of_floor": floor.of(eager_ms / gen0) if floor is not None and gen0 and eager_ms else None,
            "improvements": extra.get("improvements", []),
            "roofline": extra.get("roofline"),
            "roof_key": extra.get("roof_key"),
            "roof_3xtf32": extra.get("roof_3xtf32"),
            "roof_3xtf32_datasheet": extra.get("roof_3xtf32_datasheet"),
            "ceilings": extra.get("ceilings"),
            "autotune_ms": autotune_ms,
            "autotune_compile_s": autotune_s,
            "speedup_autotune": autotune_ms / ours_ms if autotune_counts and ours_ms else None,
            "reduce_overhead_ms": extra.get("reduce_overhead_ms"),
            "speedup_reduce_overhead": (extra["reduce_overhead_ms"] / ours_ms
                                        if extra.get("reduce_overhead_ms") and ours_ms else None),
            "graph_replays": extra.get("graph_replays"),
            "other_sizes": extra.get("other_sizes") if correct else None,
            **floor_fields(floor, ours_ms, eager_ms, compile_ms),
            "message": p.get("message", ""),
            "run_dir": p.get("run_dir"),
        })
    return rows


def _compile_factor(row: dict[str, Any]) -> float | None:
    """torch.compile's speedup over eager; 1.0 where eager was timed but torch.compile was not (it failed: a
    user would run eager); None where nothing was timed."""
    if row["eager_ms"] is None:
        return None
    return row["compile_vs_eager"] if row["compile_vs_eager"] is not None else 1.0


GOAL_BELOW_FLOOR = 0.70  # the search's goal counts problems whose generation 0 reached less of the floor than this
GOAL_MEDIAN_GAIN = 1.10  # ... and asks this of their median gain
GOAL_LARGE_GAIN, GOAL_LARGE_SHARE = 1.25, 0.25  # ... and this gain of at least this share of them


def goal_gain(row: dict[str, Any]) -> float | None:
    """The gain a problem counts in the search's goal: timed again where --confirm-gain did (generation 0's best
    and the final best one after the other), else the final best's speedup over generation 0's as each was
    timed when found."""
    return row["confirmed_gain"] if row.get("confirmed_gain") is not None else row.get("search_gain")


def search_goal(correct: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The search's goal over the correct problems: those whose generation 0 was below GOAL_BELOW_FLOOR of the
    floor count, their median gain (goal_gain) against GOAL_MEDIAN_GAIN and the share that gained GOAL_LARGE_GAIN
    against GOAL_LARGE_SHARE; those already near the floor count as met; those without a floor or a gain are
    named."""
    with_both = [r for r in correct if r.get("gen0_of_floor") is not None and goal_gain(r) is not None]
    below = [r for r in with_both if r["gen0_of_floor"] < GOAL_BELOW_FLOOR]
    gains = [goal_gain(r) for r in below]
    median = statistics.median(gains) if gains else None
    large = sum(g >= GOAL_LARGE_GAIN for g in gains)
    return {
        "below_floor": len(below),
        "timed_again": sum(r.get("confirmed_gain") is not None for r in below),
        "median_gain": median,
        "large_gains": large,
        "near_floor": [r["name"] for r in with_both if r["gen0_of_floor"] >= GOAL_BELOW_FLOOR],
        "not_counted": [r["name"] for r in correct if r not in with_both],
        "met": None if not below else median >= GOAL_MEDIAN_GAIN and large >= GOAL_LARGE_SHARE * len(below),
    }


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The figures the issue asks for.

    solved: the problems ours got correct and timed. Over them: our geomean speedup vs eager, torch.compile's
    geomean vs eager (a problem where torch.compile did not run counts 1.0x), our geomean vs torch.compile.
    all: every judged problem. Ours counts a failed problem as 1.0x (eager stays); None when correct problems
    exist but none was timed. torch.compile's over every problem with an eager time."""
    judged = [r for r in rows if r["judged"]]
    correct = [r for r in judged if r["correct"]]
    solved = [r for r in correct if r["speedup_eager"] is not None and r["eager_ms"] is not None]
    untimed_correct = len(correct) - len(solved)
    timed = any(r["eager_ms"] is not None for r in rows)
    ours_solved = geomean(r["speedup_eager"] for r in solved)
    compile_solved = geomean(_compile_factor(r) for r in solved)
    vs_compile = [r["speedup_compile"] for r in solved if r["speedup_compile"] is not None]
    if timed and (solved or not correct):
        ours_all = geomean([r["speedup_eager"] for r in solved] + [1.0] * (len(judged) - len(correct)))
    else:
        ours_all = None  # nothing timed, or correct problems without a time: no figure (never a made-up 1.0)
    with_eager = [r for r in judged if r["eager_ms"] is not None]
    compile_all = geomean(_compile_factor(r) for r in with_eager)
    fraction = len(correct) / len(judged) if judged else None
    gains = sorted(r["search_gain"] for r in correct if r.get("search_gain") is not None)
    return {
        "problems": len(rows),
        # eager under the 0.5 ms: the suite's size requirement does not hold for these
        "eager_under_min_ms": [r["name"] for r in rows if r["eager_ms"] is not None and r["eager_ms"] < MIN_REFERENCE_MS],
        "judged": len(judged),
        "unjudged": [r["name"] for r in rows if not r["judged"]],
        "correct": len(correct),
        "correct_fraction": fraction,
        "timed": timed,
        "solved": {
            "timed": len(solved),
            "untimed_correct": untimed_correct,
            "ours_vs_eager": ours_solved,
            "compile_vs_eager": compile_solved,
            "ours_vs_compile": geomean(vs_compile),
            "ours_vs_compile_over": len(vs_compile),
            "compile_not_timed": sum(r["compile_vs_eager"] is None for r in solved),
        },
        "all": {
            "ours_vs_eager": ours_all,
            "ours_over": len(solved) + len(judged) - len(correct),
            "compile_vs_eager": compile_all,
            "compile_over": len(with_eager),
            "compile_not_timed": sum(r["compile_vs_eager"] is None for r in with_eager),
            "without_eager_time": len(judged) - len(with_eager),
        },
        "search": {
            "median_gain_over_gen0": statistics.median(gains) if gains else None,
            "over": len(gains),
            "improved": sum(g > 1.0 for g in gains),
            "goal": search_goal(correct),
        },
        "floor": floor_metrics(rows),
        "other_sizes": {
            "checked": sum(_holds(r) is not None for r in correct),
            "hold": sum(_holds(r) is True for r in correct),
            "fail": [r["name"] for r in correct if _holds(r) is False],
        },
        "autotune": {
            "ours_vs": geomean(r["speedup_autotune"] for r in solved if r.get("speedup_autotune") is not None),
            "over": sum(r.get("speedup_autotune") is not None for r in solved),
            "slow_compile": [r["name"] for r in rows if r.get("autotune_compile_s") is not None
                             and r["autotune_compile_s"] >= AUTOTUNE_COMPILE_LIMIT_S],
        },
        "criteria": {
            "correct_fraction_at_least_0.9": None if fraction is None else fraction >= CORRECT_TARGET,
            "ours_at_least_compile_solved": _at_least(ours_solved, compile_solved),
            "ours_at_least_compile_all": _at_least(ours_all, compile_all),
        },
    }


def _holds(row: dict[str, Any]) -> bool | None:
    """Whether the problem's best held at the other sizes its run judged it at; None where none were judged."""
    return (row.get("other_sizes") or {}).get("holds")


def _at_least(ours: float | None, theirs: float | None) -> bool | None:
    return None if ours is None or theirs is None else ours >= theirs


# -- text ------------------------------------------------------------------------------------------

def _ms(value: float | None) -> str:
    return NA if value is None else f"{value:.4g}"


def _x(value: float | None) -> str:
    return NA if value is None else f"{value:.3f}x"


def _share(value: float | None) -> str:
    return NA if value is None else f"{value:.1%}"


def _verdict(value: bool | None) -> str:
    return NA if value is None else ("yes" if value else "no")


COLUMNS = ("#", "problem", "status", "eager ms", "compile ms", "ours ms", "vs eager", "vs compile",
           "compile vs eager", "evals", "correct", "other sizes")
LEFT = {"problem", "status", "correct"}


def table_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The per-problem table as aligned text. A time that was not measured reads n/a; ours reads - where no
    correct kernel exists; a * marks eager / torch.compile times that came from the reference pass."""
    body = []
    for r in rows:
        mark = "*" if r["baseline_source"] == "reference pass" else ""
        none = NONE if not r["correct"] else None
        body.append([
            "" if r["number"] is None else str(r["number"]), r["name"], str(r["status"]),
            _ms(r["eager_ms"]) + mark, _ms(r["compile_ms"]) + mark,
            none or _ms(r["ours_ms"]), none or _x(r["speedup_eager"]), none or _x(r["speedup_compile"]),
            _x(r["compile_vs_eager"]) + mark, NONE if r["evaluations"] is None else str(r["evaluations"]),
            "yes" if r["correct"] else "no", none or _verdict(_holds(r)),
        ])
    widths = [max([len(c)] + [len(line[i]) for line in body]) for i, c in enumerate(COLUMNS)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(w) if col in LEFT else cell.rjust(w)
                         for cell, w, col in zip(cells, widths, COLUMNS, strict=True)).rstrip()

    out = [line(COLUMNS), line(["-" * w for w in widths])]
    out += [line(cells) for cells in body]
    if any(r["baseline_source"] == "reference pass" for r in rows):
        out.append("* eager / torch.compile times from the reference pass (our search found no correct kernel)")
    return out


COURSE_COLUMNS = ("#", "problem", "gen 0", "final", "gain timed again", "improved by (speedup after, move)", "roof",
                  "3xTF32 roof",
                  "3xTF32 sheet", "floor ms", "ours/eager/compile of floor", "autotune ms", "vs autotune",
                  "reduce-overhead ms", "vs reduce-overhead")
COURSE_LEFT = {"problem", "improved by (speedup after, move)"}


def _improved_by(improvements: Sequence[dict[str, Any]]) -> str:
    def one(i: dict[str, Any]) -> str:
        move = move_text(i.get("move"), most=2)
        return f"{i['expert']} {i['to']:.3f}x" + (f" ({move})" if move else "")
    return ", ".join(one(i) for i in improvements) or NONE


def course_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The second table: the search's course (speedups vs eager of generation 0's best and the final best, and the
    experts whose candidates raised it), the best against the roofs, torch.compile max-autotune-no-cudagraphs
    (its time where it compiled within AUTOTUNE_COMPILE_LIMIT_S; '>60 s' where it did not) and torch.compile
    reduce-overhead (CUDA graphs; '(graph)' where our best replays a CUDA graph too). "gain timed again": with
    --confirm-gain, generation 0's best over the final best timed one after the other (kfoundry.bench.confirm)."""
    body = []
    for r in rows:
        autotune = _ms(r.get("autotune_ms"))
        if r.get("autotune_compile_s") is not None and r["autotune_compile_s"] >= AUTOTUNE_COMPILE_LIMIT_S:
            autotune = f">{AUTOTUNE_COMPILE_LIMIT_S:g} s"
        body.append([
            "" if r["number"] is None else str(r["number"]), r["name"], _x(r.get("gen0_speedup")),
            _x(r.get("final_speedup")), _x(r.get("confirmed_gain")), _improved_by(r.get("improvements") or []),
            NA if r.get("roofline") is None else f"{_share(r['roofline'])} {r.get('roof_key') or ''}".rstrip(),
            _share(r.get("roof_3xtf32")), _share(r.get("roof_3xtf32_datasheet")), floor_text(r), of_floor_text(r),
            autotune,
            _x(r.get("speedup_autotune")), _ms(r.get("reduce_overhead_ms")) + (" (graph)" if r.get("graph_replays")
                                                                              else ""),
            _x(r.get("speedup_reduce_overhead")),
        ])
    widths = [max([len(c)] + [len(line[i]) for line in body]) for i, c in enumerate(COURSE_COLUMNS)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(w) if col in COURSE_LEFT else cell.rjust(w)
                         for cell, w, col in zip(cells, widths, COURSE_COLUMNS, strict=True)).rstrip()

    out = [line(COURSE_COLUMNS), line(["-" * w for w in widths]), *(line(cells) for cells in body)]
    ceilings = sorted({r["ceilings"] for r in rows if r.get("ceilings")})
    out.append("roof: the diagnosis's roofline (the key names the compute roof); 3xTF32 roof: three TF32 products "
               "per FLOP at the ceilings of the run (" + ("; ".join(ceilings) or "-") + "), and at the datasheet's")
    sources = sorted({r["floor_source"] for r in rows if r.get("floor_source")})
    if sources:
        out.append(f"{FLOOR_MEANING}; floor ms names the roof that sets it; at the {' and '.join(sources)} ceilings")
    return out


def label_line(labels: dict[str, Any]) -> str:
    def get(key: str) -> str:
        value = labels.get(key)
        return "-" if value in (None, "") else str(value)

    return (f"device: {get('device')}; torch {get('torch')}; triton {get('triton')}; precision {get('precision')}; "
            f"tolerance {get('tolerance')}; correctness trials {get('trials')}; timing trials "
            f"{get('timing_trials')}; statistic {get('statistic')}; timing: {get('timing')}")


def summary_lines(summary: dict[str, Any], labels: dict[str, Any], settings: dict[str, Any]) -> list[str]:
    s, a, c = summary["solved"], summary["all"], summary["criteria"]
    lines = [
        f"kfoundry optimize --llm none, max {settings.get('max_evals')} evaluations per problem"
        + (f", {settings['time_per_problem_s']:g} s per problem" if settings.get("time_per_problem_s") else "")
        + f"; {label_line(labels)}",
    ]
    if not summary["timed"]:
        lines.append("no timings: nothing was timed (no GPU: Triton's interpreter is not a performance "
                     "measurement); every time and speedup is n/a, only correctness is meaningful")
    fraction = summary["correct_fraction"]
    lines.append(f"correct: {summary['correct']} of {summary['judged']} problems ({_share(fraction)}); "
                 f"at least {CORRECT_TARGET:.0%}: {_verdict(c['correct_fraction_at_least_0.9'])}")
    sizes = summary.get("other_sizes") or {}
    if sizes.get("checked"):
        lines.append(f"the best held at other sizes: {sizes['hold']} of {sizes['checked']} checked"
                     + (f"; not: {', '.join(sizes['fail'])}" if sizes["fail"] else ""))
    if summary["unjudged"]:
        lines.append(f"left out (the reference itself failed): {', '.join(summary['unjudged'])}")
    if summary["timed"]:
        short = summary.get("eager_under_min_ms") or []
        lines.append(f"eager at least {MIN_REFERENCE_MS:g} ms: "
                     + (f"no for {', '.join(short)}" if short else "yes for every timed problem"))
    lines.append(f"over the {s['timed']} problem(s) ours solved (timed): ours vs eager {_x(s['ours_vs_eager'])}, "
                 f"torch.compile vs eager {_x(s['compile_vs_eager'])}; ours >= torch.compile: "
                 f"{_verdict(c['ours_at_least_compile_solved'])}; ours vs torch.compile {_x(s['ours_vs_compile'])}"
                 f" (geomeans)")
    lines.append(f"over all problems: ours vs eager {_x(a['ours_vs_eager'])} (over {a['ours_over']}, a failed "
                 f"one counts 1.0x), torch.compile vs eager {_x(a['compile_vs_eager'])} (over the "
                 f"{a['compile_over']} with an eager time); ours >= torch.compile: "
                 f"{_verdict(c['ours_at_least_compile_all'])}")
    search, autotune = summary["search"], summary["autotune"]
    lines.append(f"the search over generation 0's best: median gain {_x(search['median_gain_over_gen0'])} over "
                 f"{search['over']} problem(s), {search['improved']} improved")
    goal = search.get("goal")
    if goal and (goal["below_floor"] or goal["near_floor"]):
        lines.append(
            f"the search's goal, over the {goal['below_floor']} problem(s) whose generation 0 reached under "
            f"{GOAL_BELOW_FLOOR:.0%} of the floor: median gain {_x(goal['median_gain'])} (goal "
            f"{GOAL_MEDIAN_GAIN:.2f}x), >= {GOAL_LARGE_GAIN:.2f}x on {goal['large_gains']} (goal a quarter); met: "
            f"{_verdict(goal['met'])}"
            + (f"; {goal['timed_again']} of the gains timed again" if goal.get("timed_again") else "")
            + (f"; near the floor already (met): {', '.join(goal['near_floor'])}" if goal["near_floor"] else "")
            + (f"; without a floor or a gain: {', '.join(goal['not_counted'])}" if goal["not_counted"] else ""))
    if autotune["over"] or autotune["slow_compile"]:
        lines.append(f"ours vs torch.compile max-autotune-no-cudagraphs {_x(autotune['ours_vs'])} (geomean over "
                     f"{autotune['over']})" + (f"; compiled in {AUTOTUNE_COMPILE_LIMIT_S:g} s or more, left out: "
                                               + ", ".join(autotune["slow_compile"]) if autotune["slow_compile"] else ""))
    floor = summary["floor"]
    if floor["problems"]:
        lines.append("of the floor (speed of light), geomeans: " + ", ".join(
            f"{name} {_share(floor[key]['geomean'])} (over {floor[key]['problems']})"
            for key, name in FLOOR_NAMES.items()))
    if s["untimed_correct"] and summary["timed"]:
        lines.append(f"{s['untimed_correct']} correct problem(s) without a time are left out of the figures")
    if a["without_eager_time"] and summary["timed"]:
        lines.append(f"{a['without_eager_time']} problem(s) without an eager time are left out of torch.compile's "
                     "figure over all problems")
    not_compiled = s["compile_not_timed"] + a["compile_not_timed"]
    if not_compiled and summary["timed"]:
        lines.append("a problem torch.compile did not run counts 1.0x for torch.compile")
    return lines


def render(document: dict[str, Any]) -> str:
    lines = [*table_lines(document["problems"]), "", *course_lines(document["problems"]), ""]
    lines += summary_lines(document["summary"], document["labels"], document["settings"])
    lines += [f"note: {note}" for note in document.get("notes", [])]
    return "\n".join(lines)


def notes_for(rows: Sequence[dict[str, Any]], pending: Sequence[str], interrupted: bool) -> list[str]:
    notes = []
    used_llm = [r["name"] for r in rows if r.get("llm_calls")]
    if used_llm:
        notes.append(f"LLM calls were recorded for {', '.join(used_llm)}: this was meant to run without one")
    if pending:
        notes.append(f"{len(pending)} problem(s) not run ({', '.join(pending)}): run again with --resume")
    if interrupted:
        notes.append("interrupted: run the same command with --resume to finish")
    return notes


def build_document(bench: dict[str, Any], rows: list[dict[str, Any]], settings: dict[str, Any],
                   argv: Sequence[str], stamp: str) -> dict[str, Any]:
    """The JSON record: settings, labels, one row per problem, the summary and the bench's own metrics."""
    return {
        "format": FORMAT,
        "created_utc": stamp,
        "command": ["python", "benchmarks/programmatic_suite.py", *argv],
        "settings": settings,
        "labels": bench.get("labels", {}),
        "bench_complete": bool(bench.get("complete")),
        "problems": rows,
        "pending": list(bench.get("pending", [])),
        "summary": summarize(rows),
        "bench_metrics": bench.get("metrics"),
        "notes": notes_for(rows, bench.get("pending", []), bool(bench.get("interrupted"))),
    }


def write_document(path: Path, document: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, allow_nan=False, default=str) + "\n", encoding="utf-8")
    return path


def utc_stamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")


# -- files of a bench --------------------------------------------------------------------------------

def read_bench(out: Path) -> dict[str, Any] | None:
    path = out / "bench.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def select_records(bench: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """The bench's records of these problems, in this order, wherever bench.json keeps them: a call with
    another --problems selection moved the earlier ones to "kept". Problems with no record are pending."""
    records = {p["name"]: p for p in bench.get("kept", []) + bench.get("problems", [])}
    chosen = dict(bench)
    chosen["problems"] = [records[name] for name in names if name in records]
    chosen["kept"] = [p for name, p in records.items() if name not in names]
    chosen["pending"] = [name for name in names if name not in records]
    chosen["complete"] = not chosen["pending"] and not bench.get("interrupted")
    from kfoundry.bench.metrics import summarize

    chosen["metrics"] = summarize(chosen["problems"])  # the bench's metrics, over this selection
    return chosen


SAME_SETTINGS = ("method", "options", "time_per_problem_s", "llm", "max_evals", "max_cost", "target_speedup")


def merge_benches(bench: dict[str, Any], others: Sequence[Path]) -> dict[str, Any]:
    """bench with the records of problems it lacks taken from other bench directories (first one first), each
    marked with the directory it came from; their settings must be the bench's own."""
    records = {p["name"] for p in bench.get("problems", []) + bench.get("kept", [])}
    out = dict(bench, problems=list(bench.get("problems", [])))
    mine = bench.get("settings") or {}
    for directory in others:
        other = read_bench(directory)
        if other is None:
            raise ValueError(f"no bench.json in {directory}")
        theirs = other.get("settings") or {}
        differ = [key for key in SAME_SETTINGS if mine.get(key) != theirs.get(key)]
        if differ:
            raise ValueError(f"the bench in {directory} ran with other settings ({', '.join(differ)}): "
                             "its rows would not compare")
        for record in other.get("problems", []) + other.get("kept", []):
            if record["name"] in records:
                continue
            records.add(record["name"])
            run_dir = directory / (record.get("run_dir") or f"runs/{record['name']}")
            out["problems"].append(dict(record, run_dir=str(run_dir.resolve()), from_bench=str(directory)))
    return out


def _three_tf32_fraction(point: dict[str, Any], tf32_tflops: float | None, bandwidth_gbs: float | None) -> float | None:
    """The 3xTF32 roof (three TF32 products per FLOP, or the bytes at the bandwidth if longer) over our time."""
    flops, runtime_ms = _number(point.get("flops")), _number(point.get("runtime_ms"))
    if flops is None or runtime_ms is None or not tf32_tflops:
        return None
    roof = speed_of_light(flops, point.get("bytes"), {"3xTF32": tf32_tflops / 3}, bandwidth_gbs, "")
    return roof.of(runtime_ms) if roof else None


def search_course(evaluations: Sequence[dict[str, Any]],
                  moves: dict[Any, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The best of generation 0 and each later evaluation that beat the best so far (speedups vs eager), with the
    expert that proposed it and its move (the genes it changed, from the run's result.json, by candidate id):
    what the search added to its first population."""
    moves = moves or {}
    best, gen0, improvements = None, None, []
    for item in evaluations:
        value = _number(item.get("speedup_eager")) if item.get("status") == "ok" else None
        if value is None:
            continue
        if item.get("generation") == 0:
            gen0 = value if gen0 is None else max(gen0, value)
        if best is None or value > best:
            if best is not None and item.get("generation") != 0:
                improvements.append({"expert": item.get("expert"), "generation": item.get("generation"),
                                     "candidate": item.get("candidate_id"), "from": best, "to": value,
                                     "move": moves.get(item.get("candidate_id"))})
            best = value
    return {"gen0_speedup": gen0, "final_speedup": best, "improvements": improvements}


def _result_figures(result: dict[str, Any] | None) -> dict[str, Any]:
    """From a search's result.json: LLM calls made, why it stopped, and whether its best held when judged at
    other sizes (the run's own check: None where it was not made)."""
    result = result or {}
    return {"llm_calls": (result.get("llm") or {}).get("llm_calls"), "stop_reason": result.get("stop_reason"),
            "other_sizes": (result.get("best") or {}).get("other_sizes")}


def run_figures(gathered: dict[str, Any]) -> dict[str, Any]:
    """From one problem's run (kfoundry.runs.report_data.gather): LLM calls, why it stopped, the search's course,
    its best against the roofs, the problem's floor, and the max-autotune baseline."""
    from kfoundry.evaluate.shared.device_facts import datasheet_for

    moves = {i.get("candidate_id"): i.get("move") for i in (gathered.get("result") or {}).get("improvements") or []
             if isinstance(i, dict) and i.get("move")}
    figures = {**_result_figures(gathered.get("result")), **search_course(gathered["evaluations"], moves)}
    point = gathered.get("roofline") or {}
    evaluation = (gathered.get("best") or {}).get("evaluation") or {}
    facts = evaluation.get("device_facts") or {}
    figures["roofline"] = _number(point.get("fraction_of_roofline"))
    figures["roof_key"] = point.get("peak_key")
    if (evaluation.get("correctness") or {}).get("precision") == "fp32":
        sheet = datasheet_for(facts.get("name") or "")
        figures["roof_3xtf32"] = _three_tf32_fraction(point, (facts.get("peak_tflops") or {}).get("tf32"),
                                                      facts.get("peak_bandwidth_gbs"))
        figures["roof_3xtf32_datasheet"] = (_three_tf32_fraction(point, sheet[1].get("tf32"), sheet[0])
                                            if sheet else None)
        figures["ceilings"] = facts.get("source")
    figures["floor"] = (gathered.get("floor") or {}).get("floor")
    autotune = ((evaluation.get("timing") or {}).get("baselines") or {}).get(AUTOTUNE) or {}
    figures["autotune_ms"] = _number(autotune.get("median_ms"))
    figures["autotune_compile_s"] = _number(autotune.get("setup_s"))
    graphs = ((evaluation.get("timing") or {}).get("baselines") or {}).get(GRAPHS) or {}
    figures["reduce_overhead_ms"] = _number(graphs.get("median_ms"))
    figures["graph_replays"] = (evaluation.get("guard") or {}).get("graph_replays")  # the best replays a CUDA graph
    return figures


def read_extras(out: Path, problems: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per problem, the figures of its run dir (run_figures); result.json's alone where the run left no store."""
    from kfoundry.errors import KFoundryError
    from kfoundry.runs.report_data import gather

    extras = {}
    for p in problems:
        run_dir = out / (p.get("run_dir") or f"runs/{p['name']}")
        try:
            extras[p["name"]] = run_figures(gather(run_dir))
        except (KFoundryError, OSError):
            try:
                result = json.loads((run_dir / "result.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            extras[p["name"]] = _result_figures(result)
    return extras


def baseline_records(out: Path) -> dict[str, dict[str, Any]]:
    bench = read_bench(out / BASELINES_DIR)
    if not bench:
        return {}
    return {p["name"]: p for p in bench.get("problems", []) + bench.get("kept", [])}


# -- running -----------------------------------------------------------------------------------------

def _library_setting(value: str, out: Path) -> str | None:
    if value == "fresh":
        return str(out / "library.sqlite")
    if value == "user":
        return None  # OptimizeSettings: None is the user's shared library
    return value  # "off", or a path


def _optimize_fn(library: str | None):
    """kfoundry.optimize.optimize with the library chosen here (the bench passes llm=None: no LLM)."""
    from kfoundry.optimize import OptimizeSettings, optimize

    def run(problem=None, **kwargs):
        if kwargs.get("resume") is not None:  # a run cut short: it continues with its own settings
            return optimize(**kwargs)
        return optimize(problem, settings=OptimizeSettings(library=library), **kwargs)

    return run


def _progress(verbose: bool):
    def say(message: str) -> None:
        if verbose or not message.startswith("  "):
            print(message, file=sys.stderr, flush=True)

    return say


def run(args: argparse.Namespace) -> tuple[dict[str, Any], bool]:
    """The optimize bench, then the reference pass where needed; returns (bench.json, interrupted)."""
    import dataclasses

    from kfoundry.bench.config import validate
    from kfoundry.bench.runner import run_bench
    from kfoundry.bench.settings import BenchSettings
    from kfoundry.bench.suite import discover
    from kfoundry.evaluate.parent.options import EvalOptions, resolve_device
    from kfoundry.optimize.settings import OptimizeSettings
    from kfoundry.problem import parse_set_values
    from kfoundry.run_config import RunConfig

    options = EvalOptions(device=args.device, trials=args.trials, timing_trials=args.timing_trials,
                          baselines=tuple(b.strip() for b in args.baselines.split(",") if b.strip()),
                          timeout_s=args.timeout, set_values=parse_set_values(args.set), no_cache=args.no_cache)
    config = RunConfig(search=OptimizeSettings(max_evals=args.max_evals), eval=options,
                       bench=BenchSettings(method="optimize", time_per_problem=args.time_per_problem,
                                           devices=args.devices))
    validate(config)
    devices = config.bench.device_list() or [resolve_device(options.device, options.precision)]
    on_gpu = not all(d.startswith("cpu") for d in devices)
    suite = discover(args.suite, problems=args.problems)
    for path, reason in suite.skipped:
        print(f"skipped {path}: {reason}", file=sys.stderr)
    say = _progress(args.verbose)
    report = run_bench(suite, config, args.out, resume=args.resume, progress=say,
                       optimize_fn=_optimize_fn(_library_setting(args.library, args.out)))
    interrupted = report.interrupted
    missing = {r.name for r in report.results if r.status not in UNJUDGED and r.eager_ms is None}
    fill = args.fill_baselines == "on" or (args.fill_baselines == "auto" and on_gpu)
    if missing and fill and not interrupted:
        say(f"reference pass for eager / torch.compile times: {', '.join(sorted(missing))}")
        # no_cache=False: the baselines the searches measured (and cached) are the ones read back
        reference = dataclasses.replace(config, eval=dataclasses.replace(options, no_cache=False),
                                        bench=dataclasses.replace(config.bench, method="reference"))
        picked = dataclasses.replace(suite, problems=[p for p in suite.problems if p.name in missing])
        interrupted = run_bench(picked, reference, args.out / BASELINES_DIR, resume=True, progress=say,
                                write_html=False).interrupted
    elif missing:
        why = "--fill-baselines off" if args.fill_baselines == "off" else "no GPU to time on"
        say(f"no reference pass ({why}): {len(missing)} problem(s) without eager / torch.compile times")
    bench = read_bench(args.out) or report.to_dict()
    confirm = args.confirm_gain == "on" or (args.confirm_gain == "auto" and on_gpu)
    if confirm and not interrupted:
        interrupted = confirm_gains(bench, args.out, dataclasses.replace(options, device=devices[0]), say)
    return bench, interrupted


def confirm_gains(bench: dict[str, Any], out: Path, options: Any, say: Callable[[str], None]) -> bool:
    """Each correct problem's generation-0 best and final best timed again, one after the other
    (kfoundry.bench.confirm), into OUT/confirm/; a problem confirmed by an earlier call is kept. True when
    interrupted (the next call with --resume confirms the rest)."""
    from kfoundry.bench.confirm import confirm_run, confirmation_of_run, write_confirmation

    done = read_confirmations(out)
    for p in bench.get("problems", []) + bench.get("kept", []):
        if p.get("status") != "ok" or p["name"] in done or not p.get("path"):
            continue
        run_dir = out / (p.get("run_dir") or f"runs/{p['name']}")
        confirmation = confirmation_of_run(run_dir)  # optimize times them again itself since 2026-12-06
        if confirmation is None:
            say(f"confirming {p['name']}: generation 0's best and the final best timed again, one after the other")
            try:
                confirmation = confirm_run(run_dir, Path(p["path"]), options)
            except KeyboardInterrupt:
                return True
        if confirmation is not None:
            write_confirmation(out, p["name"], confirmation)
            gain = confirmation.gain
            say(f"  {p['name']}: gain {'n/a' if gain is None else f'{gain:.3f}x'} timed again")
    return False


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", type=Path, default=DEFAULT_SUITE, help="problem directory (benchmarks/suite)")
    parser.add_argument("--max-evals", type=int, default=DEFAULT_MAX_EVALS,
                        help=f"evaluations per problem, the fixed budget (default {DEFAULT_MAX_EVALS})")
    parser.add_argument("--time-per-problem", type=float, default=None, help="seconds per problem (search budget)")
    parser.add_argument("--problems", default=None, help="pick problems by leading number, e.g. 1-9,12")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="bench directory: bench.json, runs/, baselines/ "
                             "(default kfoundry-runs/programmatic_suite)")
    parser.add_argument("--resume", action="store_true", help="continue the bench in --out (finished problems kept)")
    parser.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: CUDA when available)")
    parser.add_argument("--devices", default=None, help="several problems at once, one per device: cuda:0,cuda:1|all")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="override a module-level constant in every problem that has it (repeatable)")
    parser.add_argument("--trials", type=int, default=5, help="correctness trials per evaluation (default 5)")
    parser.add_argument("--timing-trials", type=int, default=100, help="timed trials on a GPU (default 100)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for one candidate's evaluation")
    parser.add_argument("--baselines", default="eager,compile",
                        help=f"baselines to time (default eager,compile); add {AUTOTUNE} for the report's third")
    parser.add_argument("--no-cache", action="store_true", help="re-measure the eager / torch.compile baselines")
    parser.add_argument("--library", default="fresh",
                        help="experience library: fresh (OUT/library.sqlite, the default), user (the shared one), "
                             "off, or a path")
    parser.add_argument("--fill-baselines", choices=("auto", "on", "off"), default="auto",
                        help="reference pass for problems ours did not solve: auto (on a GPU), on, off")
    parser.add_argument("--confirm-gain", choices=("auto", "on", "off"), default="auto",
                        help="time each run's generation-0 best and final best again, one after the other, and "
                             "count that ratio as the search's gain (two evaluations a problem): auto (on a GPU), "
                             "on, off")
    parser.add_argument("--json", type=Path, default=None,
                        help="where the JSON goes (default benchmarks/results/programmatic_suite-<UTC stamp>.json)")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: the table and JSON of the bench already in --out")
    parser.add_argument("--also", type=Path, action="append", default=[], metavar="DIR",
                        help="with --report-only: rows of problems --out has no record of, from another bench "
                             "directory run with the same settings (repeatable; each such row is named in the notes)")
    parser.add_argument("--verbose", action="store_true", help="print every step of every problem")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    interrupted = False
    if args.report_only:
        bench = read_bench(args.out)
        if bench is None:
            print(f"error: no bench.json in {args.out}", file=sys.stderr)
            return 2
        try:
            bench = merge_benches(bench, args.also)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if args.problems:
            from kfoundry.bench.suite import discover

            bench = select_records(bench, [p.name for p in discover(args.suite, problems=args.problems).problems])
    else:
        from kfoundry.errors import KFoundryError

        try:
            bench, interrupted = run(args)
        except KFoundryError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    stamp = utc_stamp()
    recorded = bench.get("settings") or {}
    settings = {
        "suite": str(bench.get("suite") or args.suite), "problems": args.problems, "llm": "none",
        "max_evals": recorded.get("max_evals", args.max_evals),
        "time_per_problem_s": recorded.get("time_per_problem_s", args.time_per_problem),
        "devices": args.devices, "library": args.library, "bench_dir": str(args.out),
        "options": recorded.get("options"),
    }
    baselines = {}
    for directory in [*reversed(args.also), args.out] if args.report_only else [args.out]:
        baselines.update(baseline_records(directory))
    confirmations = {}
    for directory in [*reversed(args.also), args.out] if args.report_only else [args.out]:
        confirmations.update(read_confirmations(directory))
    rows = build_rows(bench.get("problems", []), baselines, read_extras(args.out, bench.get("problems", [])),
                      confirmations)
    document = build_document(bench, rows, settings, argv, stamp)
    merged = {}
    for p in bench.get("problems", []):
        if p.get("from_bench"):
            merged.setdefault(p["from_bench"], []).append(p["name"])
    for directory, names in merged.items():
        document["notes"].append(f"rows from the bench in {directory} (an earlier call, same settings): "
                                 + ", ".join(names))
    if interrupted and not bench.get("interrupted"):  # the reference pass was
        document["notes"].append("interrupted: run the same command with --resume to finish")
    path = write_document(args.json or RESULTS_DIR / f"programmatic_suite-{stamp}.json", document)
    print(render(document))
    print(f"written: {path}")
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
