"""The library keeps only what was measured: a run that timed nothing (a CPU run) teaches no rule, never outranks
measured experience, and `library prune --unmeasured` removes what older versions kept of it."""

import json

from typer.testing import CliRunner

from kfoundry.library import Library
from kfoundry.library.cli import library_app
from kfoundry.library.distil import measured, rule_insights
from tests.library.conftest import GEMM_SIG

CPU = "AMD EPYC 7B13 (2 cores)"  # as evaluate.shared.device_facts.cpu_facts names a CPU


def _step(lib, outcome="ok", before=None, after=None, device=CPU, expert="tuner", category="memory-bound",
          child="c = 1\n"):
    return lib.record_step(GEMM_SIG, expert, "p = 0\n", child, [category], outcome, before, after, device)


def test_a_step_is_measured_when_timed_or_failed_never_when_a_cpu_passed_it():
    assert measured({"outcome": "ok", "speedup_after": 1.3, "device": "NVIDIA H200"})
    assert measured({"outcome": "wrong_output", "speedup_after": None, "device": CPU})
    assert not measured({"outcome": "ok", "speedup_after": None, "device": CPU})
    # an older version stored a CPU run's 1.0 fitness as if it had been timed
    assert not measured({"outcome": "ok", "speedup_before": 1.0, "speedup_after": 1.0, "device": CPU})


def test_a_cpu_run_makes_no_rule_insight(lib):
    for n in range(3):
        _step(lib, child=f"c = {n}\n")
        _step(lib, before=1.0, after=1.0, child=f"old = {n}\n")  # as an older version recorded a CPU run
    assert lib.distil() == []
    assert not [i for i in lib.list(type="insight") if i["origin"] == "rule"]


def test_a_rule_insight_counts_only_the_measured_steps(lib):
    timed = [_step(lib, before=1.0, after=1.5, device="NVIDIA H200", child=f"t = {n}\n") for n in range(2)]
    for n in range(4):
        _step(lib, child=f"c = {n}\n")
    [insight] = lib.distil()
    assert insight["evidence"] == timed
    assert insight["text"] == ("On gemm+pointwise problems the tuner expert improved memory-bound candidates 2 of 2 "
                               "times, median 1.50x (NVIDIA H200).")
    assert CPU not in insight["text"]


def test_distil_removes_a_rule_insight_an_older_version_made_from_unmeasured_steps(lib):
    untimed = [_step(lib, before=1.0, after=1.0, child=f"c = {n}\n") for n in range(6)]
    false = lib.add_insight(f"On gemm+pointwise problems the tuner expert did not improve memory-bound candidates in 6 "
                            f"tries (outcomes: ok 6; {CPU}).", {"kind": "gemm+pointwise"}, untimed, origin="rule",
                            key="gemm+pointwise|tuner|memory-bound")
    lib.distil()
    assert false not in {i["id"] for i in lib.list(type="insight")}


def test_unmeasured_experience_never_ranks_above_measured(lib):
    untimed = [_step(lib, child=f"c = {n}\n") for n in range(2)]
    # the case: notes resting on a CPU run's steps matched the words better than the seeded softmax note
    note = lib.add_insight("softmax row softmax row: one row per program, softmax of each row", {}, untimed,
                           origin="llm")
    found = lib.search("softmax row")
    ids = [r["id"] for r in found]
    assert found[0]["title"].startswith("Row softmax") and ids.index(note) == len(ids) - 1
    # within the problem's class a step a CPU once "timed" at 1.0 ranks after a measured step, whatever its words
    cpu_step = _step(lib, before=None, after=1.0, expert="fusion", child="fused = 1\n")
    gpu_step = _step(lib, before=1.0, after=1.2, device="NVIDIA H200", expert="memory", child="tiled = 1\n")
    results = lib.retrieve(GEMM_SIG, query_text="fusion fused", k=20, semantic=False)
    order = [r["id"] for r in results]
    assert gpu_step in order and cpu_step in order and order.index(gpu_step) < order.index(cpu_step)


def _library_with_cpu_leftovers(path):
    """What an older version left after GPU and CPU runs: measured steps, untimed ones stored as 1.0 -> 1.0 or
    None, a CPU failure, and insights resting on each."""
    with Library(path) as lib:
        gpu = [_step(lib, before=1.0, after=1.4, device="NVIDIA H200", child=f"g = {n}\n") for n in range(2)]
        new_style = _step(lib, child="n = 1\n")
        old_style = [_step(lib, before=1.0, after=1.0, expert="memory", child=f"o = {n}\n") for n in range(2)]
        failed = _step(lib, "compile_error", 1.0, None, expert="memory", child="f = 1\n")
        kept_rule = lib.distil()[0]["id"]  # the GPU steps' rule
        # made by an older version, which counted the untimed steps
        rule = lib.add_insight("On gemm+pointwise problems the memory expert did not improve memory-bound candidates "
                               "in 3 tries (outcomes: ok 2, compile_error 1).", GEMM_SIG, old_style + [failed],
                               origin="rule", key="gemm+pointwise|memory|memory-bound")
        only_untimed = lib.add_insight("BLOCK 1024 was fastest for this problem.", GEMM_SIG, old_style, origin="llm")
        mixed = lib.add_insight("Tiling the epilogue helped.", GEMM_SIG, gpu + [new_style], origin="llm")
    return {"gpu": gpu, "new_style": new_style, "old_style": old_style, "failed": failed, "rule": rule,
            "only_untimed": only_untimed, "mixed": mixed, "kept_rule": kept_rule}


def test_prune_removes_unmeasured_steps_and_the_insights_built_only_from_them(tmp_path):
    ids = _library_with_cpu_leftovers(tmp_path / "lib.sqlite")
    with Library(tmp_path / "lib.sqlite") as lib:
        planned = lib.prune_unmeasured(dry_run=True)
        assert len(lib.steps()) == 6  # a dry run removes nothing
        removed = lib.prune_unmeasured()
        assert removed == planned
        assert [s["id"] for s in removed["steps"]] == [ids["new_style"], *ids["old_style"]]
        # the rule insight: its group has one measured step left, under the support a rule needs
        assert [i["id"] for i in removed["insights"]] == [ids["rule"], ids["only_untimed"]]
        assert {s["id"] for s in lib.steps()} == {*ids["gpu"], ids["failed"]}
        insights = {i["id"]: i for i in lib.list(type="insight")}
        assert insights[ids["mixed"]]["evidence"] == ids["gpu"] and ids["kept_rule"] in insights
        assert lib.prune_unmeasured() == {"steps": [], "insights": []}
        assert rule_insights(lib.steps()) and all(measured(s) for s in lib.steps())


def test_prune_command_prints_what_it_removed(tmp_path):
    db = tmp_path / "lib.sqlite"
    ids = _library_with_cpu_leftovers(db)
    runner = CliRunner()
    result = runner.invoke(library_app, ["prune", "--library", str(db)])
    assert result.exit_code == 2 and "--unmeasured" in result.output
    shown = runner.invoke(library_app, ["show", str(ids["old_style"][0]), "--library", str(db)])
    assert "speedup: not measured" in shown.stdout  # an older version's CPU "1.00x -> 1.00x"
    dry = runner.invoke(library_app, ["prune", "--unmeasured", "--dry-run", "--library", str(db)])
    assert dry.exit_code == 0 and "would remove 3 unmeasured steps and 2 insights" in dry.stdout
    result = runner.invoke(library_app, ["prune", "--unmeasured", "--library", str(db)])
    assert result.exit_code == 0, result.output
    assert f"removed #{ids['only_untimed']:<5} BLOCK 1024 was fastest" in result.stdout
    assert "removed 3 unmeasured steps and 2 insights that rested on them" in result.stdout
    again = json.loads(runner.invoke(library_app, ["prune", "--unmeasured", "--library", str(db), "--json"]).stdout)
    assert again == {"dry_run": False, "steps": [], "insights": []}
