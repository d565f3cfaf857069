"""The run's side of the experience library: what it retrieves at the start, what it records after
each evaluation, and what it leaves behind at the end (the best kernel, distilled insights)."""

from __future__ import annotations

from typing import Any

from kfoundry.search.individual import Individual

SAME_PROBLEM_KEYS = ("ops", "inputs", "outputs", "parameters")


def same_problem(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """The same computation on the same shapes: a kernel for one runs the other."""
    return bool(a) and bool(b) and all(a.get(k) == b.get(k) for k in SAME_PROBLEM_KEYS)


class Experience:
    def __init__(self, library: Any, signature: dict[str, Any] | None, run_id: str, device: str | None):
        self.library = library  # kfoundry.library.Library, or None when the library is off
        self.signature = signature or {}
        self.run_id = run_id
        self.device = device

    def retrieve(self, k: int) -> list[dict[str, Any]]:
        if self.library is None or k <= 0:
            return []
        return self.library.retrieve(self.signature, k=k)

    def kernels_for_this_problem(self) -> list[dict[str, Any]]:
        """Library kernels written for this very computation (an earlier run's best): seeds."""
        if self.library is None or not self.signature:
            return []
        out = []
        for item in self.library.list(type="kernel"):
            if same_problem(item.get("signature") or {}, self.signature):
                full = self.library.get(item["id"])
                if full.get("code"):
                    out.append(full)
        return out

    def tuning_preferences(self) -> dict[str, int]:
        if self.library is None:
            return {}
        from kfoundry.experts.tuner import preferred_settings

        return preferred_settings(self.library.tuning_records(self.signature.get("kind")))

    def record(self, child: Individual, parent: Individual | None, data: dict[str, Any] | None) -> None:
        """One parent -> child step (seeds, composed and library kernels have no parent: not steps)."""
        if self.library is None or parent is None:
            return
        categories = sorted({f.category for f in parent.diagnosis.findings}) if parent.diagnosis else []
        self.library.record_step(self.signature, child.expert, parent.source, child.source, categories,
                                 child.status, parent.fitness, child.fitness, device=self.device,
                                 run_id=self.run_id, data=data)

    def finish(self, best: dict[str, Any] | None, problem_name: str) -> list[dict[str, Any]]:
        """Keep the best verified kernel (when it was timed) and re-distil the rule insights."""
        if self.library is None:
            return []
        if best is not None and best.get("speedup_eager") is not None:
            self.library.add_kernel(f"best kernel found for {problem_name}", self.signature, best["source"],
                                    notes=f"{best['speedup_eager']:.3g}x over eager on {self.device}",
                                    speedup=best["speedup_eager"], device=self.device)
        return self.library.distil()
