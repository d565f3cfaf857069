"""The run's side of the experience library: what it retrieves at the start, what it records after
each evaluation, and what it leaves behind at the end (the best kernel, distilled insights)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from kfoundry.errors import brief
from kfoundry.experts.prompt_budget import DEFAULT_RETRIEVE_TOKENS, fit_items, left_out_note, note, tokenizer
from kfoundry.search.individual import Individual
from kfoundry.sqlite_files import DamagedFile

SAME_PROBLEM_KEYS = ("ops", "inputs", "outputs", "parameters")


def same_problem(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """The same computation on the same shapes: a kernel for one runs the other."""
    return bool(a) and bool(b) and all(a.get(k) == b.get(k) for k in SAME_PROBLEM_KEYS)


def measured_speedup(ind: Individual) -> float | None:
    """Its timed speedup over eager; None where it was not timed (a CPU run: its fitness is then 1.0, which
    is no measurement) or failed."""
    info = ind.parent_info
    return getattr(info, "speedup_eager", None) if ind.ok else None


def nothing_close_note(found: Any, signature: dict[str, Any]) -> dict[str, Any]:
    """What the prompt says when no library item passed the similarity floor (a library.store.Retrieval)."""
    floor = getattr(found, "floor", None)
    if not getattr(found, "by_signature", True):
        return note("The experience library was not searched for this problem: its signature could not be "
                    "computed, so no library item is shown.", floor=floor)
    best = getattr(found, "best_similarity", None)
    if best is None:
        return note("The experience library holds no items yet, so none is shown.", floor=floor)
    from kfoundry.problem_signature import problem_class as class_of

    title = getattr(found, "best_title", None) or "untitled"
    from kfoundry.library.store import OTHER_CLASS_FLOOR

    return note(f"The experience library holds nothing close enough to this problem ({class_of(signature)} "
                f"class): no item reaches the similarity floor ({floor:.2f} for items of its class, "
                f"{OTHER_CLASS_FLOOR:.2f} for others; the closest, \"{title}\", scores {best:.2f}), so none is "
                "shown.", score=best, floor=floor, best_similarity=best, best_title=title)


def library_note(exc: BaseException) -> str:
    """What a run says when its library cannot be used (a damaged file, a newer schema)."""
    return f"the experience library cannot be used, and this run goes on without it: {brief(exc, 400)}"


class Experience:
    """`on_damaged(note)`: called once if the library turns out damaged (at any query); the run then
    goes on without it."""

    def __init__(self, library: Any, signature: dict[str, Any] | None, run_id: str, device: str | None,
                 on_damaged: Callable[[str], None] | None = None):
        self.library = library  # kfoundry.library.Library, or None when the library is off (or damaged)
        self.signature = signature or {}
        self.run_id = run_id
        self.device = device
        self.on_damaged = on_damaged

    def use(self, default: Any, action: Callable[[Any], Any]) -> Any:
        """action(library), or `default` when the library is off or turns out damaged (then dropped)."""
        if self.library is None:
            return default
        try:
            return action(self.library)
        except DamagedFile as exc:  # at any query, not only at open: a file damaged mid-way
            note = library_note(exc)
            try:
                self.library.close()
            except sqlite3.Error:
                pass
            self.library = None
            if self.on_damaged is not None:
                self.on_damaged(note)
            return default

    def retrieve(self, k: int, tokens: int = DEFAULT_RETRIEVE_TOKENS) -> list[dict[str, Any]]:
        """The experts' experience: at most k library items close to this problem, cut to `tokens` tokens best
        first (kfoundry.experts.prompt_budget.fit_items), then a note when some were left out for the budget;
        only a note when none was close enough. [] without a library."""
        if k <= 0:
            return []
        found = self.use(None, lambda library: library.retrieve(self.signature, k=k))
        if found is None:
            return []
        if not found:
            return [nothing_close_note(found, self.signature)]
        kept, left_out = fit_items(list(found), tokens)
        return kept + ([left_out_note(left_out, tokens, tokenizer().name)] if left_out else [])

    def kernels_for_this_problem(self) -> list[dict[str, Any]]:
        """Library kernels written for this very computation (an earlier run's best): seeds."""
        if not self.signature:
            return []

        def kernels(library) -> list[dict[str, Any]]:
            out = []
            for item in library.list(type="kernel"):
                if same_problem(item.get("signature") or {}, self.signature):
                    full = library.get(item["id"])
                    if full.get("code"):
                        out.append(full)
            return out

        return self.use([], kernels)

    def tuning_preferences(self) -> dict[str, int]:
        from kfoundry.experts.tuner import preferred_settings

        return self.use({}, lambda library: preferred_settings(library.tuning_records(self.signature)))

    def move_gains(self) -> dict[str, float]:
        """Per genome move, the gain it gave on problems of this class (kfoundry.experts.genome_moves)."""
        from kfoundry.experts.genome_moves import move_gains

        return self.use({}, lambda library: move_gains(library.genome_records(self.signature)))

    def record(self, child: Individual, parent: Individual | None, data: dict[str, Any] | None) -> None:
        """One parent -> child step. A first kernel written to a strategy is a step from nothing (how that strategy
        did); seeds, composed and library kernels have no parent and are not steps."""
        if parent is None and not (data or {}).get("strategy"):
            return
        categories = sorted({f.category for f in parent.diagnosis.findings}) if parent and parent.diagnosis else []
        self.use(None, lambda library: library.record_step(
            self.signature, child.expert, parent.source if parent else None, child.source, categories, child.status,
            measured_speedup(parent) if parent else None, measured_speedup(child), device=self.device,
            run_id=self.run_id, data=data))

    def finish(self, best: dict[str, Any] | None, problem_name: str) -> list[dict[str, Any]]:
        """Keep the best verified kernel (when it was timed) and re-distil the rule insights."""
        def keep(library) -> list[dict[str, Any]]:
            if best is not None and best.get("speedup_eager") is not None:
                library.add_kernel(f"best kernel found for {problem_name}", self.signature, best["source"],
                                   notes=f"{best['speedup_eager']:.3g}x over eager on {self.device}",
                                   speedup=best["speedup_eager"], device=self.device)
            return library.distil()

        return self.use([], keep)
