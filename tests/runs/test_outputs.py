import ast
import json

import pytest

from kfoundry.runs.outputs import write_outputs
from tests.runs.conftest import evaluation

BEST = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):  # a comment kept as is
    def forward(self, x):
        return x
'''


def test_write_outputs(store):
    seed = store.add_candidate("import torch\nclass ModelNew: pass\n", [], "seed", 0, 0, "seed")
    store.finish_evaluation(store.start_evaluation(seed), evaluation("ok", 1.0, 0.8, runtime_ms=2.0))
    best = store.add_candidate(BEST, [seed], "llm", 0, 1, "llm")
    store.finish_evaluation(store.start_evaluation(best), evaluation("ok", 3.0, 2.0, runtime_ms=0.6))
    store.add_llm_call(best, "llm", {"cost_usd": 0.1, "input_tokens": 10, "output_tokens": 3}, "p", None)

    paths = write_outputs(store, {"kind": "cuda", "name": "Fake GPU"})
    header = "# Kernel Foundry: verified at the problem file's own sizes\n"
    assert paths["best"].read_text() == header + BEST  # exactly as evaluated, comments included
    assert "ModelNew" in {n.name for n in ast.parse(paths["best"].read_text()).body
                          if isinstance(n, ast.ClassDef)}

    result = json.loads(paths["result"].read_text())
    assert result["best"]["candidate_id"] == best
    assert result["best"]["speedup_eager"] == 3.0 and result["best"]["speedup_compile"] == 2.0
    assert result["best"]["timing"]["statistic"] == "median"
    assert result["best_speedup_compile"]["candidate_id"] == best
    assert [item["id"] for item in result["lineage"]] == [best, seed]
    assert result["evaluations"] == 2 and result["correctness_rate"] == 1.0
    assert result["llm"]["cost_usd"] == 0.1
    assert result["device"] == {"kind": "cuda", "name": "Fake GPU"}
    assert result["versions"]["torch"] == "2.99" and result["versions"]["python"]
    assert result["problem"]["name"] == "problem.py" and result["seed"] == 7
    assert result["wall_time_s"] >= 0

    history = json.loads(paths["history"].read_text())
    assert [h["best_speedup_eager_so_far"] for h in history] == [1.0, 3.0]


def test_write_outputs_without_a_verified_candidate(store):
    (store.run_dir / "best.py").write_text("stale")
    cid = store.add_candidate("x = 1\n", [], "seed", 0, 0, "seed")
    store.finish_evaluation(store.start_evaluation(cid), evaluation("crash"))
    paths = write_outputs(store, {})
    assert "best" not in paths and not (store.run_dir / "best.py").exists()
    result = json.loads(paths["result"].read_text())
    assert result["best"] is None and result["lineage"] == [] and result["correctness_rate"] == 0.0
    assert result["generation0"] is None and result["improvements"] == [] and result["gain_over_generation0"] is None


def test_the_outputs_report_the_searchs_own_best_where_it_chose_one(store):
    """Untimed (CPU) verdicts tie: by the speedups alone the first evaluation started would be reported, while
    the search kept the one whose verdict it recorded first. Its choice stands in result.json and best.py;
    a choice that is not a verified candidate falls back to the best by speedup."""
    first = store.add_candidate(BEST, [], "initializer", 0, 0, "llm")
    second = store.add_candidate(BEST.replace("return x", "return x.clone()"), [], "initializer", 1, 0, "llm")
    first_eval, second_eval = store.start_evaluation(first), store.start_evaluation(second)
    store.finish_evaluation(second_eval, evaluation("ok", None, None))  # came back first
    store.finish_evaluation(first_eval, evaluation("ok", None, None))
    broken = store.add_candidate("class ModelNew: pass\n", [], "repair", 0, 1, "llm")
    store.finish_evaluation(store.start_evaluation(broken), evaluation("runtime_error", None, None))
    assert store.final_best()["candidate_id"] == first  # no choice stored: by speedup, then the first started
    store.choose_best(second)
    paths = write_outputs(store, {"kind": "cpu"})
    assert json.loads(paths["result"].read_text())["best"]["candidate_id"] == second
    assert "x.clone()" in paths["best"].read_text()
    store.choose_best(broken)
    assert store.final_best()["candidate_id"] == first


def test_a_best_replayed_from_a_cuda_graph_says_what_to_compare_it_with(store):
    graphed = evaluation("ok", 3.0, 2.0, runtime_ms=0.6)
    graphed["guard"] = {"graph_replays": 7}
    best = store.add_candidate(BEST, [], "composer", 0, 0, "template")
    store.finish_evaluation(store.start_evaluation(best), graphed)
    header = write_outputs(store, {"kind": "cuda", "name": "Fake GPU"})["best"].read_text().splitlines()[1]
    assert "replayed from a CUDA graph" in header and "reduce-overhead" in header
    assert "not timed" in header and "--baselines eager,compile,compile-reduce-overhead" in header


def test_a_graph_best_with_reduce_overhead_timed_gives_the_figure(store):
    graphed = evaluation("ok", 3.0, 2.0, runtime_ms=0.6)
    graphed["guard"] = {"graph_replays": 7}
    graphed["timing"]["candidate"] = {"median_ms": 0.6}
    graphed["timing"]["baselines"] = {"compile-reduce-overhead": {"median_ms": 0.9}}
    best = store.add_candidate(BEST, [], "composer", 0, 0, "template")
    store.finish_evaluation(store.start_evaluation(best), graphed)
    header = write_outputs(store, {"kind": "cuda", "name": "Fake GPU"})["best"].read_text().splitlines()[1]
    assert "reduce-overhead (CUDA graphs too): 0.9 ms (ours 1.5x vs it)" in header


def test_result_json_says_where_the_speed_came_from(store):
    from tests.runs.test_credit import TILES, TUNE, build_credit_run

    ids = build_credit_run(store)
    result = json.loads(write_outputs(store, {"kind": "cuda"})["result"].read_text())
    assert result["best"]["candidate_id"] == ids["tiled"] and result["best"]["speedup_eager"] == 1.8
    assert result["generation0"] == {"candidate_id": ids["seed"], "expert": "initializer", "speedup_eager": 1.2}
    assert [(s["candidate_id"], s["expert"], s["move"]) for s in result["improvements"]] == [
        (ids["seed"], "initializer", None), (ids["tuned"], "tuner", TUNE), (ids["tiled"], "genome", TILES)]
    second = result["improvements"][1]
    assert second["generation"] == 1 and second["parent_ids"] == [ids["seed"]]
    assert (second["speedup_before"], second["speedup_after"]) == (1.2, 1.5) and second["gain"] == pytest.approx(1.25)
    assert result["improvements"][2]["gain"] == pytest.approx(1.2)
    assert result["gain_over_generation0"] == pytest.approx(1.5)


def test_an_untimed_result_json_credits_nothing(store):
    first = store.add_candidate("a = 1\n", [], "seed", 0, 0, "seed")
    store.finish_evaluation(store.start_evaluation(first), evaluation("ok"))
    result = json.loads(write_outputs(store, {"kind": "cpu"})["result"].read_text())
    assert result["generation0"] == {"candidate_id": first, "expert": "seed", "speedup_eager": None}
    assert result["improvements"] == [] and result["gain_over_generation0"] is None
