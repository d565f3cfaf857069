"""`kfoundry.optimize`: the whole search on one problem. Retrieval from the experience library,
a first population (the user's seeds, earlier best kernels for this very problem, the composer's
kernels), then multi-island evolution with the router's experts; every candidate, evaluation,
LLM call and event goes to the run store as it happens, so a killed run resumes where it stopped."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kfoundry.diagnose import diagnose
from kfoundry.errors import EnvironmentFault, KFoundryError, UsageError
from kfoundry.evaluate import EvalOptions
from kfoundry.evaluate.parent.options import GRAPH_BASELINE
from kfoundry.experts.base import Proposal
from kfoundry.experts.genome_experts import restore_states, states_of
from kfoundry.experts.tuner_expert import restore_in, state_of
from kfoundry.optimize.experience import Experience
from kfoundry.optimize.outcome import outcome, stored_outcome
from kfoundry.optimize.progress import ProgressView
from kfoundry.optimize.restore import stored_individuals, verdicts_missing_baselines
from kfoundry.optimize.session import Session, open_session, problem_name
from kfoundry.optimize.settings import OptimizeSettings
from kfoundry.problem import read_source
from kfoundry.problem_signature import problem_class
from kfoundry.runs.outputs import write_outputs
from kfoundry.search import LocalQueue
from kfoundry.search.individual import Individual
from kfoundry.search.queue import Outcome
from kfoundry.types import Evaluation

if TYPE_CHECKING:
    from kfoundry.run_config import RunConfig

ORIGIN = {"seed": "seed", "library": "seed", "composer": "template", "tuner": "tuner"}  # else: llm, or a seed
CPU_NOTE = ("on CPU: correctness only (Triton's interpreter is not a performance measurement); every "
            "correct candidate has fitness 1.0, so the search keeps the first one it verifies")


ELAPSED_EVERY_S = 2.0


class Optimization:
    """One optimize run (new or resumed) of a Session (kfoundry.optimize.session, which wires it): seeds it,
    runs the search, finishes; `run()` returns the result record."""

    def __init__(self, session: Session, quiet: bool, progress: Any = None, preflight: bool = True):
        self.session = session
        self.problem, self.store, self.settings = session.problem, session.store, session.settings
        self.options, self.seeds, self.llm, self.budget = session.options, session.seeds, session.llm, session.budget
        self.resumed = session.resumed
        self.run_dir = self.store.run_dir
        self.name = problem_name(Path(self.store.meta()["problem_path"]))
        self.quiet = quiet
        self.external_progress = progress  # a caller's line per phase (bench), beside the panel
        self.evaluations: dict[str, dict[str, Any]] = {}  # candidate id -> {evaluation, diagnosis}, as stored
        # candidate id -> (evaluation id, verdict) given in this process: baselines measured later join them
        self._verdicts: dict[str, tuple[int, Any]] = {}
        self._stopping = False  # the search was interrupted: evaluations cut short stay unfinished, for --resume
        self._fault: EnvironmentFault | None = None  # the machine failed: nothing more is evaluated or recorded
        self.individuals: dict[str, Individual] = {}
        self.notes: list[str] = []
        self.composed: list[Any] = []  # the composer's kernels for this problem (a new run only)
        self.experts: list[Any] = []  # the enabled experts (kfoundry.experts.registry), in the router's order
        self.preflight = preflight

    # -- set-up ---------------------------------------------------------------------------------

    def _signature(self) -> dict[str, Any] | None:
        from kfoundry.problem_signature import signature

        try:
            return signature(self.problem, self.options.set_values)
        except Exception as exc:  # noqa: BLE001 -- retrieval is a help, not a requirement
            self.store.event("signature_error", error=f"{type(exc).__name__}: {exc}")
            return None

    def _input_facts(self, signature: dict[str, Any] | None) -> Any:
        """The shapes under test and what the inputs had in common, for the prompts (LLM experts only)."""
        if self.llm is None:
            return None
        from kfoundry.input_facts import problem_facts

        try:
            return problem_facts(self.problem, self.options.set_values, self.options.precision,
                                 outputs=(signature or {}).get("outputs"))
        except Exception as exc:  # noqa: BLE001 -- the prompts say less without them; the run goes on
            self.store.event("input_facts_error", error=f"{type(exc).__name__}: {exc}")
            return None

    def _library(self) -> Any:
        if self.settings.library == "off":
            return None
        from kfoundry.library import Library
        from kfoundry.library.store import LibraryError
        from kfoundry.sqlite_files import DamagedFile

        try:
            return Library(self.settings.library)
        except (LibraryError, DamagedFile) as exc:  # damaged, or of a newer schema: the run goes on without it
            from kfoundry.optimize.experience import library_note

            self._library_damaged(library_note(exc))
            return None

    def _library_damaged(self, note: str) -> None:
        self.view.note(note)
        self.notes.append(note)
        self.store.event("library_damaged", note=note)

    def _first_population(self, experience: Experience) -> list[Individual]:
        k = self.settings.islands
        children: list[Individual] = []

        def add(source: str, expert: str, record: dict[str, Any] | None = None) -> None:
            children.append(Individual(id=f"s{len(children)}", source=source, expert=expert,
                                       island=len(children) % k, generation=0, record=record or {}))

        for path in self.seeds:
            add(read_source(path, UsageError, "seed"), "seed")
        for item in experience.kernels_for_this_problem():
            add(item["code"], "library")
        for candidate in self.composed[:self.settings.compose_variants]:
            # the rest wait for the router to pick the composer
            add(candidate.source, "composer", {"genome": candidate.genome.to_dict()} if candidate.genome else None)
        return children

    def _compose(self, device: Any = None, reference: Any = None) -> tuple[list[Any], Any]:
        """The composer's candidates and its genome space (genome.GenomeSpace, or None), their tiles fitted to the
        GPU the kernels are for (`device`: this run's, or on a CPU the --target-gpu); `reference`: how the reference
        rounds, as the judge saw it (types.ReferenceRounding: the composer orders a conv's main-loop precisions by it)."""
        try:
            from kfoundry.experts.composer import compose
            from kfoundry.experts.composer.templates.device_limits import kernel_target

            # twice what the first population takes: the rest wait for the router to pick the composer
            result = compose(self.problem, set_values=self.options.set_values, precision=self.options.precision,
                             eval_mode=self.options.eval_mode, max_variants=2 * self.settings.compose_variants,
                             tolerance=self.options.tolerance, name=self.name,  # a resumed run's too: its own
                             device=kernel_target(device, self.settings.target_gpu), reference=reference)
        except Exception as exc:  # noqa: BLE001 -- the composer is one source of first kernels, never a reason to stop
            message = f"the composer failed ({type(exc).__name__}: {exc})"
            self.store.event("composed", count=0, unsupported=[], message=message)
            self.notes.append(f"composer: {message}")
            return [], None
        genomes = result.space.size() if result.space is not None else 0
        self.store.event("composed", count=len(result.candidates), unsupported=list(result.unsupported),
                         message=result.message, genomes=genomes)
        self.notes.append(f"composer: {result.message}" + (f" Its genome space holds {genomes} candidate(s)."
                                                            if genomes else ""))
        return list(result.candidates), result.space

    # -- the evaluation side (runs in the queue's thread) ------------------------------------------

    def _origin(self, expert: str) -> str:
        enabled = next((e for e in self.experts if e.name == expert), None)
        return "llm" if enabled is not None and enabled.traits.needs_llm else ORIGIN.get(expert, "seed")

    def _store_call(self, candidate_id: int | None, record: dict[str, Any]) -> None:
        """The LLM call an expert's proposal came from (kfoundry.experts.llm_step.LLMStep.record)."""
        call = record.get("llm_call")
        if call is not None:
            self.store.add_llm_call(candidate_id, call["expert"], call["reply"], call["prompt_hash"],
                                    failure=call.get("failure"))

    def _identify(self, ind: Individual) -> str:
        existing = self.store.find_by_hash(ind.source_hash)
        if existing is not None:
            self._store_call(existing, ind.record)
            return str(existing)
        cid = self.store.add_candidate(ind.source, [int(p) for p in ind.parent_ids], ind.expert, ind.island,
                                       ind.generation, self._origin(ind.expert), source_hash=ind.source_hash)
        self._store_call(cid, ind.record)
        if "strategy" in ind.record:
            self.store.event("strategy", candidate_id=cid, island=ind.island, strategy=ind.record["strategy"])
        # what it changed: a genome expert's move, or the tuner's settings (the report's "where the speed came from")
        changes = ind.record.get("changes")
        move = ind.record.get("move") or (changes and {"kind": "tune", "changed": changes})
        if move:
            self.store.event("move", candidate_id=cid, expert=ind.expert, move=move)
        return str(cid)

    def _dropped(self, expert: str, proposal: Proposal) -> None:
        """A proposal that became no candidate (no source, or a duplicate): its LLM call is kept all the same."""
        self._store_call(None, proposal.record)

    def _evaluate(self, ind: Individual) -> Outcome:
        done = self.evaluations.get(ind.id)
        if done is not None:  # evaluated before a stop: the verdict stands, nothing is repeated
            if not done.get("evaluation"):
                return Outcome("crash")
            return stored_outcome(done["evaluation"], done.get("diagnosis"), ind.source, ind.id)
        if self._fault is not None:  # queued behind the evaluation that met it: it would fail the same way
            raise self._fault
        cid = int(ind.id)
        eval_id = self.store.start_evaluation(cid)
        path = self._candidate_file(cid, ind.source)
        try:
            evaluation = self.evaluator.evaluate(path)
        except EnvironmentFault as fault:
            # no verdict: its evaluation stays unfinished, so a --resume once the machine is fixed evaluates it
            self._fault = self._fault or fault
            self._stopping = True
            raise
        except Exception as exc:
            if self._stopping:
                raise
            evaluation = self._failed(exc, ind.source)
        self.store.finish_evaluation(eval_id, evaluation)
        self._save_elapsed()  # at every verdict, the first population's too (the loop records those all at once)
        self._verdicts[ind.id] = (eval_id, evaluation)
        data = evaluation.to_dict()
        self.evaluations[ind.id] = {"evaluation": data, "diagnosis": data.get("diagnosis")}
        return outcome(evaluation, ind.source, ind.id)

    def _failed(self, exc: Exception, source: str) -> Evaluation:
        """The verdict when the evaluator itself failed on a candidate (a worker that never started, a judge
        that went away): a crash, stored like any verdict, so the run's record has no row left open."""
        evaluation = Evaluation(status="crash", message=f"the evaluator failed: {type(exc).__name__}: {exc}",
                                phase="evaluate", error={"type": type(exc).__name__, "text": str(exc)})
        evaluation.diagnosis = diagnose(evaluation, source)
        return evaluation

    # -- events -------------------------------------------------------------------------------------

    def _on_event(self, event: dict[str, Any]) -> None:
        kind = event["event"]
        self.store.event(kind, **{k: v for k, v in event.items() if k != "event"})
        if kind == "evaluated":
            ind = self.loop.individuals.get(event["id"])
            if ind is not None:
                self.individuals[ind.id] = ind
                self._remember(ind)
        if kind == "generation":
            self.store.save_state("search", self.loop.state())
            self.store.save_state("tuner", state_of(self.experts))
            self.store.save_state("genome_experts", states_of(self.experts))
        totals = self.store.totals()
        self.view.event(event, totals.get("cost_usd"), totals.get("unknown_cost_calls") or 0)

    def _remember(self, ind: Individual) -> None:
        """The step into the experience library (on the event loop's thread, where the library lives)."""
        parent = self.individuals.get(ind.parent_ids[0]) if ind.parent_ids else None
        # what the expert knows of its change (the tuner's settings, an initializer's strategy); not the LLM call
        data = {key: value for key, value in ind.record.items() if key != "llm_call"} or None
        try:
            self.experience.record(ind, parent, data)
        except Exception as exc:  # noqa: BLE001 -- the library learns from the run; it never stops it
            self.store.event("library_error", error=f"{type(exc).__name__}: {exc}")

    def _cost(self) -> float:
        return float(self.store.totals().get("cost_usd") or 0.0)

    def _progress(self, message: str) -> None:
        """The evaluator's phases (reference: inputs, ...; candidate N: compile, ...) on the panel or the log."""
        view = getattr(self, "view", None)
        if view is not None:
            view.status(message)
        if self.external_progress is not None:
            self.external_progress(message)

    # -- the run --------------------------------------------------------------------------------------

    def _environment_warnings(self) -> list[str]:
        """kfoundry doctor's cheap checks of this machine (none on a Ray cluster: the work runs elsewhere): what
        certainly fails every evaluation stops the run before its first candidate (an EnvironmentFault); what
        may still work is a warning."""
        if not self.preflight or self.settings.cluster:
            return []
        from kfoundry.doctor import preflight, stop_or_warn

        warnings = stop_or_warn(preflight(self.options.device, self.options.sandbox))
        for warning in warnings:
            self.store.event("environment_warning", warning=warning)
        return [f"environment: {warning}" for warning in warnings]

    def run(self) -> dict[str, Any]:
        s, session = self.settings, self.session
        warnings = self._environment_warnings()
        evaluator, workers = session.evaluator(self._progress)
        with evaluator as self.evaluator:
            self.view = ProgressView(quiet=self.quiet, timed=self.evaluator.device != "cpu", max_evals=s.max_evals,
                                     max_time_s=s.max_time_s, max_cost=s.max_cost)
            with self.view:
                for warning in warnings:
                    self.view.note(warning)
                    self.notes.append(warning)
                self.view.status("reference: expected outputs" +
                                 (" and baselines" if self.evaluator.device != "cpu" else ""))
                prepared = self.evaluator.prepare()
                workers = getattr(self.evaluator, "slots", workers)  # known once its memory is planned
                if self.evaluator.device == "cpu":
                    self.view.note(CPU_NOTE)
                    self.notes.append(CPU_NOTE)
                if self.llm is None:
                    note = "no LLM configured: the composer writes the first kernels and the tuner evolves them"
                    self.view.note(note)
                    self.notes.append(note)
                signature = self._signature()
                self.experience = Experience(self._library(), signature, self.run_dir.name,
                                             prepared.device_facts.name, on_damaged=self._library_damaged)
                retrieved = self.experience.retrieve(s.retrieve)
                self.store.event("retrieved", items=[{"id": r["id"], "title": r["title"], "score": r["score"]}
                                                     for r in retrieved])
                snapshot = self.store.load_state("search") if self.resumed else None
                # a run stopped before its first generation ended builds its first population again; a resumed
                # one composes too, for the genome experts' space (the same candidates, the same sources)
                self.composed, space = self._compose(prepared.device_facts, prepared.reference_rounding) \
                    if s.compose_variants > 0 else ([], None)
                if snapshot is not None:
                    self.composed = []
                archipelago = session.archipelago()
                self.experts = session.experts(
                    problem_source=self.evaluator.source.text, name=self.name, device=prepared.device_facts,
                    experience=retrieved, archipelago=archipelago,
                    left_over=[c.source for c in self.composed[s.compose_variants:]],
                    preferred=self.experience.tuning_preferences(), problem_class=problem_class(signature or {}),
                    facts=self._input_facts(signature), timed=self.evaluator.device != "cpu", space=space,
                    move_gains=self.experience.move_gains(),
                    baseline_ms=prepared.measured_median_ms if self.evaluator.device != "cpu" else None)
                near = session.near_duplicates(self.view.status)
                # the evaluator runs one candidate per worker at once; two threads more check the next
                # candidates' sources and diagnose finished ones meanwhile, so no worker waits for that
                with LocalQueue(self._evaluate, workers=workers + 2) as queue:
                    self.loop = session.loop(archipelago, queue, self.experts, workers, on_event=self._on_event,
                                             cost_fn=self._cost, identify=self._identify, dropped=self._dropped,
                                             near_duplicates=near)
                    try:
                        reason = asyncio.run(self._search())
                    except BaseException:
                        self._stopping = True  # before the queue waits for the evaluations in flight
                        raise
                # before the evaluator closes, which ends the baseline process: a fast search is often done
                # before torch.compile's baseline is, and its verdicts would never get it
                if any(evaluation.timing.baselines_pending for _, evaluation in self._verdicts.values()):
                    self.view.status("reference: waiting for torch.compile's baseline")
                self._complete_baselines()
                self._graph_baseline()
        return self._finish(reason, prepared)

    async def _search(self) -> str:
        snapshot = self.store.load_state("search") if self.resumed else None
        stored, evaluations = stored_individuals(self.store) if self.resumed else ({}, {})
        self.evaluations.update(evaluations)
        facts = getattr(getattr(self.evaluator, "prepared", None), "device_facts", None)
        self._verdicts.update(verdicts_missing_baselines(evaluations, getattr(facts, "name", None)))
        if snapshot is not None:
            self.loop.restore(snapshot, stored)
        if self.resumed:  # the time the killed session spent after its last snapshot counts too
            self.loop.take_in_elapsed(float((self.store.load_state("elapsed") or {}).get("s", 0.0)))
        self.loop.start_clock()  # the first population's evaluations count for --max-time
        keeper = asyncio.ensure_future(self._keep_time())
        try:
            await self._first_candidates(snapshot, stored)
            result = await self.loop.run()
        finally:
            keeper.cancel()
        return result.reason

    async def _first_candidates(self, snapshot: dict[str, Any] | None, stored: dict[str, Individual]) -> None:
        """What the search starts from: a resumed snapshot's interrupted generation, or the first population."""
        if snapshot is not None:
            # "tuner_rng": a run saved before the tuner kept its steps
            restore_in(self.experts, self.store.load_state("tuner") or self.store.load_state("tuner_rng"))
            restore_states(self.experts, self.store.load_state("genome_experts"))
            self.individuals.update(self.loop.individuals)
            correct = sum(1 for i in self.loop.individuals.values() if i.ok)
            self.view.resume_from(self.loop.search.evals, correct, self.loop.search.best_fitness,
                                  self.loop.search.elapsed_s, self.loop.search.generation)
            orphans = [ind for cid, ind in stored.items() if cid not in self.loop.individuals]
            if orphans:  # the generation the stop cut short: its children, evaluated or not, are taken in
                self.view.status(f"resuming: {len(orphans)} candidate(s) of the interrupted generation")
                await self.loop.seed(orphans)
        else:  # a new run, or one stopped during its first population: what it stored comes first
            first = list(stored.values()) + self._first_population(self.experience)
            if first:
                self.view.status(f"first population: {len(first)} candidate(s)")
                await self.loop.seed(first)

    async def _keep_time(self) -> None:
        """The search's elapsed time, stored as it passes (at every verdict and every ELAPSED_EVERY_S), so
        a kill loses little of it."""
        while True:
            await asyncio.sleep(ELAPSED_EVERY_S)
            self._save_elapsed()

    def _save_elapsed(self) -> None:
        """From the event loop or an evaluation's thread: the loop's state is only read."""
        self.store.save_state("elapsed", {"s": round(self.loop.elapsed_s(), 3)})

    def _complete_baselines(self) -> None:
        """Verdicts given before torch.compile's baseline was measured get its figures now."""
        complete = getattr(self.evaluator, "complete", None)
        if complete is not None:
            self._amend_timings(complete)

    def _graph_baseline(self) -> None:
        """A best that replays its kernels from a CUDA graph is compared with torch.compile's mode that does
        too (reduce-overhead): timed now where the run's baselines did not include it, and the timed verdicts
        get its figure (the report and best.py say so)."""
        best = self.loop.best()
        _, evaluation = self._verdicts.get(best.id, (None, None)) if best is not None and best.ok else (None, None)
        timing = getattr(self.evaluator, "time_baselines", None)
        if evaluation is None or evaluation.timing.candidate is None or timing is None \
                or not evaluation.guard.get("graph_replays") \
                or GRAPH_BASELINE in evaluation.timing.baselines:
            return
        self.view.status(f"reference: timing torch.compile {GRAPH_BASELINE} (the best replays a CUDA graph)")
        try:
            measured = timing([GRAPH_BASELINE])
        except EnvironmentFault as fault:
            self.notes.append(f"torch.compile {GRAPH_BASELINE} was not timed: {fault}")
            return
        if not measured:
            self.notes.append(f"torch.compile {GRAPH_BASELINE} could not be timed (see the baselines' errors)")
        self._amend_timings(self.evaluator.attach_baselines)

    def _amend_timings(self, attach) -> None:
        """Every verdict `attach` gave baselines to (True) is stored again with them."""
        for candidate_id, (eval_id, evaluation) in self._verdicts.items():
            if attach(evaluation):
                self.store.amend_timing(eval_id, evaluation)
                self.evaluations[candidate_id]["evaluation"] = evaluation.to_dict()

    def _finish(self, reason: str, prepared: Any) -> dict[str, Any]:
        self.store.save_state("search", self.loop.state())
        device_info = {"device": self.evaluator.device, **asdict(prepared.device_facts)}
        if getattr(self.evaluator, "devices", None):
            device_info["devices"] = list(self.evaluator.devices)
        if getattr(prepared, "workers", None):
            device_info["workers"] = prepared.workers
        chosen = self.loop.best()
        self.store.choose_best(int(chosen.id) if chosen is not None and chosen.ok else None)
        self._check_best_sizes()
        paths = write_outputs(self.store, device_info)
        best = self.store.final_best()
        self.experience.finish(best, self.name)
        if self.llm is not None:
            from kfoundry.optimize.insights import summarize_run

            self.experience.use(None, lambda library: summarize_run(
                self.llm, self.budget, self.store, library, self.run_dir.name, self.experience.signature, self.name,
                prepared.device_facts.name))
        again = self._time_gain_again()
        result = json.loads(paths["result"].read_text())
        if again is not None:
            result["timed_again"] = again.to_dict()
        result.update({"stop_reason": reason, "run_dir": str(self.run_dir), "notes": self.notes,
                       "llm_used": self.llm is not None, "timed": self.evaluator.device != "cpu",
                       "generations": self.loop.search.generation})
        paths["result"].write_text(json.dumps(result, indent=2) + "\n")
        try:
            from kfoundry.runs.report import write_report

            write_report(self.run_dir)
        except Exception as exc:  # noqa: BLE001 -- the report is a view; the run's records stand without it
            self.store.event("report_error", error=f"{type(exc).__name__}: {exc}")
        self.store.event("finished", reason=reason)
        if self.session.joined_cluster:  # a caller's own connection stays
            from kfoundry.distributed import disconnect

            disconnect()
        if self.experience.library is not None:
            self.experience.library.close()
        return result


    def _candidate_file(self, cid: int, source: str) -> Path:
        """The candidate's source as run_dir/candidates/<id>.py, the file an evaluator reads."""
        path = self.run_dir / "candidates" / f"{cid}.py"
        path.parent.mkdir(exist_ok=True)
        path.write_text(source, encoding="utf-8")
        return path

    def _time_gain_again(self) -> Any:
        """On a GPU, generation 0's best and the final best timed again, one after the other through one evaluator
        with nothing else in flight (kfoundry.bench.confirm), once the search's evaluator has closed: a
        Confirmation, or None (not timed, not asked for, or the final best is generation 0's). Why: on one H100 the
        searches timed generation 0's bests up to 36% slow while their finals agreed within 5% (2026-12-06), and the
        gain as found carried that."""
        from kfoundry.bench.confirm import Confirmation, candidates_to_confirm, confirm_run

        if str(self.evaluator.device).startswith("cpu") or self._fault is not None or not self.settings.time_again:
            return None
        pair = candidates_to_confirm(self.run_dir)  # from result.json, written just before
        if pair is None:
            return None
        done = self.store.load_state("timed_again")
        if done and done.get("pair") == list(pair):
            return Confirmation.from_dict(done["confirmation"])  # a resumed run timed them already
        for cid in pair:  # the files the evaluations read (a run folder copied without them still has its store)
            self._candidate_file(cid, self.store.candidate(cid)["source"])
        device = self.evaluator.device if isinstance(self.evaluator.device, str) else self.options.device
        try:
            confirmation = confirm_run(self.run_dir, self.problem, dataclasses.replace(self.options, device=device))
        except EnvironmentFault as fault:  # the search is over: its results stand, with the reason
            self.notes.append(f"generation 0's best and the final best not timed again: environment fault: "
                              f"{fault.cause}")
            return None
        if confirmation is None:
            return None
        self.store.save_state("timed_again", {"pair": list(pair), "confirmation": confirmation.to_dict()})
        self.store.event("timed_again", **confirmation.to_dict())
        gain = confirmation.gain
        self.notes.append(
            "generation 0's best and the final best timed again, one after the other: "
            + (f"gain {gain:.3f}x" if gain is not None else "no gain (" + "; ".join(
                f"candidate {t.candidate}: {t.status} {t.message}".strip()
                for t in (confirmation.generation0, confirmation.final)) + ")"))
        return confirmation

    def _check_best_sizes(self) -> None:
        """The final best judged again at a second size set (kfoundry.evaluate.parent.size_check): once per run,
        after the search's evaluator has closed (its judge's memory is free again)."""
        best = self.store.final_best()
        if best is None or self._fault is not None:
            return
        done = self.store.load_state("size_check")
        if done and done.get("candidate_id") == best["candidate_id"]:
            return  # a resumed run whose best was checked already
        from kfoundry.evaluate.parent.size_check import check_sizes
        from kfoundry.size_sets import size_constants
        from kfoundry.types import SizeCheck, to_jsonable

        if not self.settings.check_sizes:
            check = SizeCheck(verified_at=size_constants(self.problem, self.options.set_values),
                              message="not asked for (--no-check-sizes)")
        else:
            path = self._candidate_file(best["candidate_id"], best["source"])
            device = self.evaluator.device if isinstance(self.evaluator.device, str) else self.options.device
            say = (lambda message: None) if self.quiet else (lambda message: print(message, file=sys.stderr))
            try:
                check = check_sizes(self.problem, path, dataclasses.replace(self.options, device=device),
                                    progress=say)
            except EnvironmentFault as fault:  # the search is over: the run's results stand, with the reason
                check = SizeCheck(verified_at=size_constants(self.problem, self.options.set_values),
                                  message=f"environment fault: {fault.cause}")
        self.store.save_state("size_check", {"candidate_id": best["candidate_id"], **to_jsonable(check)})
        self.store.event("size_check", candidate_id=best["candidate_id"], summary=check.summary())
        self.notes.append(check.summary())


def optimize(problem: str | Path | None = None, *, out: str | Path | None = None, resume: str | Path | None = None,
             config: RunConfig | None = None, options: EvalOptions | None = None,
             settings: OptimizeSettings | None = None, llm: list[str] | None = None, seeds: list[str | Path] = (),
             quiet: bool = True, llm_client: Any = None, budget: Any = None, progress: Any = None,
             preflight: bool = True, **overrides: Any) -> dict[str, Any]:
    """Run (or, with `resume=RUN_DIR`, continue) a search on `problem`; returns the result record
    (what result.json holds). A new run takes `config` (kfoundry.run_config.RunConfig, as the command line
    builds it), or its sections `settings` and `options`; `overrides` are OptimizeSettings fields
    (max_evals=..., islands=...), which a resumed run takes too (its budget may grow). `preflight`: kfoundry
    doctor's cheap checks first (a caller that ran them already, such as a bench, leaves them out).

    An EnvironmentFault (the machine fails every evaluation the same way) stops the run at once: no candidate
    is charged with it, the evaluation it cut short stays unfinished for --resume, and the fault carries
    `run_dir` where the run is kept."""
    session = open_session(problem, out=out, resume=resume, config=config, options=options, settings=settings,
                           llm=llm, seeds=seeds, llm_client=llm_client, budget=budget, **overrides)
    store = session.store
    try:
        return Optimization(session, quiet, progress=progress, preflight=preflight).run()
    except KeyboardInterrupt as exc:
        exc.run_dir = str(store.run_dir)  # for the caller's "continue with --resume" message
        raise
    except KFoundryError as exc:
        # a new run that failed before its first candidate (its problem's get_inputs raised, say): nothing in
        # its folder is worth keeping, and left there it would block the same command (-o exists; --resume
        # repeats the failure)
        if resume is None and not store.candidates():
            store.close()
            shutil.rmtree(store.run_dir, ignore_errors=True)
        elif isinstance(exc, EnvironmentFault):
            store.event("environment_fault", cause=exc.cause, fix=exc.fix)
            exc.run_dir = str(store.run_dir)  # for the caller's "continue with --resume" message
        raise
    finally:
        store.close()
