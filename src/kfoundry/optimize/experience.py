"""The run's side of the experience library: what it retrieves at the start, what it records after
each evaluation, and what it leaves behind at the end (the best kernel, distilled insights)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from kfoundry.errors import brief
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

    def retrieve(self, k: int) -> list[dict[str, Any]]:
        if k <= 0:
            return []
        return self.use([], lambda library: library.retrieve(self.signature, k=k))

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

        return self.use({}, lambda library: preferred_settings(library.tuning_records(self.signature.get("kind"))))

    def record(self, child: Individual, parent: Individual | None, data: dict[str, Any] | None) -> None:
        """One parent -> child step (seeds, composed and library kernels have no parent: not steps)."""
        if parent is None:
            return
        categories = sorted({f.category for f in parent.diagnosis.findings}) if parent.diagnosis else []
        self.use(None, lambda library: library.record_step(
            self.signature, child.expert, parent.source, child.source, categories, child.status,
            measured_speedup(parent), measured_speedup(child), device=self.device, run_id=self.run_id, data=data))

    def finish(self, best: dict[str, Any] | None, problem_name: str) -> list[dict[str, Any]]:
        """Keep the best verified kernel (when it was timed) and re-distil the rule insights."""
        def keep(library) -> list[dict[str, Any]]:
            if best is not None and best.get("speedup_eager") is not None:
                library.add_kernel(f"best kernel found for {problem_name}", self.signature, best["source"],
                                   notes=f"{best['speedup_eager']:.3g}x over eager on {self.device}",
                                   speedup=best["speedup_eager"], device=self.device)
            return library.distil()

        return self.use([], keep)
