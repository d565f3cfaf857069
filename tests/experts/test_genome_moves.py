"""Diagnosis rules to genome moves, and the gains the library saw for each move."""

import json
import math

from kfoundry.experts.composer.genome import MOVES
from kfoundry.experts.genome_moves import (RULE_MOVES, MoveSteps, StepLog, bound_rule, gene_steps, move_gains,
                                          moves_for)
from kfoundry.types import DiagnosticFinding, Diagnosis


def _diagnosis(rule):
    return Diagnosis(status="ok", summary="", findings=[
        DiagnosticFinding(category="roofline", severity="info", title=""),
        DiagnosticFinding(category="bound", severity="info", title="", data={"rule": rule})])


def test_each_rule_leads_with_its_moves_and_every_move_follows():
    assert bound_rule(_diagnosis("launch-bound")) == "launch-bound" and bound_rule(None) is None
    for rule, first in RULE_MOVES.items():
        order = moves_for(_diagnosis(rule))
        assert tuple(order[:len(first)]) == first and sorted(order) == sorted(MOVES)
    assert moves_for(_diagnosis("register-spills"))[0] == "tiles_down"
    assert moves_for(_diagnosis("launch-bound"))[:2] == ["graph", "fuse"]
    assert moves_for(None)[0] == "fuse"  # no timing (a CPU run): fusions first


def test_wrong_outputs_take_a_more_accurate_main_loop_first_and_a_correct_parent_last():
    wrong = Diagnosis(status="wrong_output", summary="")
    assert moves_for(wrong)[0] == "accurate" and sorted(moves_for(wrong)) == sorted(MOVES)
    for rule in RULE_MOVES:
        assert moves_for(_diagnosis(rule))[-1] == "accurate"  # a costlier loop cannot make a correct one faster
    assert moves_for(None)[-1] == "accurate"


def test_learned_gains_order_the_moves_the_rule_leaves():
    order = moves_for(_diagnosis("register-spills"), {"layout": 1.3, "config": 1.1, "fuse": 0.8})
    assert order[:3] == ["tiles_down", "layout", "config"] and order.index("fuse") > order.index("graph")


def test_gains_are_geometric_means_of_timed_steps():
    records = [{"move": {"kind": "fuse"}, "speedup_before": 1.0, "speedup_after": 2.0},
               {"move": {"kind": "fuse"}, "speedup_before": 2.0, "speedup_after": 1.0},
               {"move": {"kind": "graph"}, "speedup_before": 1.0, "speedup_after": 1.5},
               {"move": {"kind": "graph"}, "speedup_before": None, "speedup_after": 1.0},  # not timed
               {"move": {}, "speedup_before": 1.0, "speedup_after": 3.0}]
    gains = move_gains(records)
    assert math.isclose(gains["fuse"], 1.0) and math.isclose(gains["graph"], 1.5) and len(gains) == 2


def test_what_a_move_did_in_this_run_orders_it_and_a_clear_loser_goes_last():
    run = MoveSteps()
    run.observe("graph", 2.0, 2.4, True)  # 1.2x
    run.observe("tiles_up", 2.0, 1.0, True)  # 0.5x
    run.observe("tiles_up", 2.0, None, False)  # failed: counts as 0.5x
    run.observe("explore", 2.0, 1.0, True)  # not a move of MOVES: not counted
    run.observe("config", None, 1.0, True)  # a parent without a speed: not counted
    assert set(run.logs) == {"graph", "tiles_up"} and run.losing() == {"tiles_up"}
    # one step of 1.2x against a prior of 1.0 (two steps' worth): 1.2 ** (1/3)
    assert math.isclose(run.blended({})["graph"], 1.2 ** (1 / 3))
    assert math.isclose(run.blended({"graph": 1.5})["graph"], (1.2 * 1.5 ** 2) ** (1 / 3))
    order = moves_for(_diagnosis("compute-bound"), {}, run)  # the rule names precision, then tiles_up
    assert order[0] == "precision" and order[-1] == "tiles_up" and sorted(order) == sorted(MOVES)
    assert order.index("graph") < order.index("fuse")  # 1.2x in this run puts it ahead of DEFAULT_ORDER's first
    assert MoveSteps.restore(json.loads(json.dumps(run.state()))).logs == run.logs
    assert moves_for(_diagnosis("compute-bound"), {}, MoveSteps()) == moves_for(_diagnosis("compute-bound"))


def test_gene_steps_of_any_json_value_are_judged_and_survive_a_resume():
    """A genome's genes hold strings, booleans and None besides numbers; a step keeps them as they are, through the
    run's saved state (JSON) and back."""
    changed = {"gemm_0.BK": [32, 64], "gemm_0.precision": ["fp16x3", "tf32x3"], "gemm_0.tma": [None, True],
               "graph": [False, True], "odd": "not a pair"}
    steps = gene_steps(changed)
    assert steps == [("gemm_0.BK", 32, 64), ("gemm_0.precision", "fp16x3", "tf32x3"), ("gemm_0.tma", None, True),
                     ("graph", False, True)]
    log = StepLog()
    log.observe(steps[:2], 2.0, None, False)  # a failed child (0.5x) and another: both steps held twice
    log.observe(steps[:2], 2.0, 0.9, True)
    log.observe([steps[2]], 2.0, 1.9, True)  # tma alone: 0.95x, fine
    log.observe(steps[2:], 2.0, 1.0, True)  # tma and graph held twice at 0.5x
    log.observe(steps[2:], 2.0, 1.0, True)
    log.observe(steps[2:], None, 1.0, True)  # no parent speed: nothing learned
    assert log.harmful() == {steps[0], steps[1], steps[3]}  # tma is fine alone, so the pairs do not blame it
    again = StepLog.restore(json.loads(json.dumps(log.state())))
    assert again.harmful() == log.harmful() and again.held == log.held
