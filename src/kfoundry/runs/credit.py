"""Where a run's speed came from: the best of its first generation, every verified candidate that raised the
run's best speedup over eager (with the move its expert recorded), and the final best's gain over generation 0.
The speedups are the store's, the figure result.json's best reports; a run that timed nothing (CPU) has none."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kfoundry.runs.store import RunStore


def ratio(after: float | None, before: float | None) -> float | None:
    return None if after is None or not before else after / before


def _rank(entry: dict[str, Any]) -> tuple:
    # as queries.best orders: timed first, fastest first, then the earliest evaluation
    speedup = entry["speedup_eager"]
    return (speedup is None, -(speedup or 0.0), entry["evaluation_id"])


def generation0_best(verified: list[dict[str, Any]]) -> dict[str, Any] | None:
    first = [entry for entry in verified if entry["generation"] == 0]
    if not first:
        return None
    best = min(first, key=_rank)
    return {key: best[key] for key in ("candidate_id", "expert", "speedup_eager")}


def improvements(verified: list[dict[str, Any]], moves: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each verified candidate, in the order its verdict came, whose speedup beat the best before it."""
    found, best = [], None
    for entry in verified:
        speedup = entry["speedup_eager"]
        if speedup is None or (best is not None and speedup <= best):
            continue
        found.append({"candidate_id": entry["candidate_id"], "expert": entry["expert"],
                      "generation": entry["generation"], "parent_ids": entry["parent_ids"],
                      "move": moves.get(entry["candidate_id"]), "speedup_before": best, "speedup_after": speedup,
                      "gain": ratio(speedup, best)})
        best = speedup
    return found


def moves_of(store: RunStore) -> dict[int, dict[str, Any]]:
    """candidate id -> the move its expert recorded (the driver's "move" events)."""
    return {event["candidate_id"]: event.get("move") for event in store.events("move")
            if isinstance(event.get("candidate_id"), int)}


def credit(store: RunStore, final_speedup: float | None) -> dict[str, Any]:
    """result.json's generation0, improvements and gain_over_generation0 (`final_speedup`: the reported best's)."""
    verified = store.verified_in_order()
    first = generation0_best(verified)
    return {"generation0": first, "improvements": improvements(verified, moves_of(store)),
            "gain_over_generation0": ratio(final_speedup, (first or {}).get("speedup_eager"))}


def _change_text(name: str, change: Any) -> str:
    if isinstance(change, dict) and {"from", "to"} <= change.keys():  # the tuner's tuning_record form
        change = (change["from"], change["to"])
    if isinstance(change, (list, tuple)) and len(change) == 2:
        return f"{name} {change[0]}\u2192{change[1]}"
    return f"{name} {change}"


def move_text(move: dict[str, Any] | None, most: int = 4) -> str:
    """A move in a few words: "tune: BLOCK 1024→2048, num_warps 4→8" (at most `most` genes, then "+N more")."""
    if not isinstance(move, dict):
        return ""
    changed = move.get("changed") if isinstance(move.get("changed"), dict) else {}
    parts = [_change_text(str(name), change) for name, change in list(changed.items())[:most]]
    if len(changed) > most:
        parts.append(f"+{len(changed) - most} more")
    kind = str(move.get("kind") or "move")
    return f"{kind}: {', '.join(parts)}" if parts else kind
