"""A run's outputs: best.py, result.json, history.json in the run directory."""

from __future__ import annotations

import json
import os
import platform
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kfoundry.evaluate.parent.options import GRAPH_BASELINE
from kfoundry.runs.credit import credit

if TYPE_CHECKING:
    from kfoundry.runs.store import RunStore


def _installed(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def versions(best_evaluation: dict[str, Any] | None) -> dict[str, Any]:
    timing = (best_evaluation or {}).get("timing") or {}
    return {
        "python": platform.python_version(),
        "kfoundry": _installed("kfoundry"),
        # what the best was timed with, else what is installed now
        "torch": timing.get("torch_version") or _installed("torch"),
        "triton": timing.get("triton_version") or _installed("triton"),
    }


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _dump(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=False, allow_nan=False) + "\n"


def build_result(store: RunStore, device_info: dict[str, Any]) -> dict[str, Any]:
    best = store.final_best()
    best_compile = store.best("speedup_compile")
    totals = store.totals()
    meta = store.meta()
    best_part = None
    if best is not None:
        timing = best["evaluation"].get("timing") or {}
        best_part = {
            "candidate_id": best["candidate_id"],
            "evaluation_id": best["evaluation_id"],
            "speedup_eager": best["speedup_eager"],
            "speedup_compile": best["speedup_compile"],
            "runtime_ms": best["runtime_ms"],
            "eager_ms": best["eager_ms"],
            "compile_ms": best["compile_ms"],
            "expert": best["expert"],
            "origin": best["origin"],
            "island": best["island"],
            "generation": best["generation"],
            "source_hash": best["source_hash"],
            # how the figures were obtained
            "timing": {k: timing.get(k) for k in ("statistic", "trials", "method", "device")},
            "correctness": {k: (best["evaluation"].get("correctness") or {}).get(k)
                            for k in ("trials", "trials_passed", "tolerance", "precision")},
            "precision_checked": best["evaluation"].get("precision") or {},
            "other_sizes": size_check_of(store, best["candidate_id"]),
        }
    return {
        "problem": {k: meta[f"problem_{k}"] for k in ("name", "path", "sha256")},
        "seed": meta["seed"],
        "settings": meta["settings"],
        "best": best_part,
        # the best by speedup vs torch.compile may be another candidate
        "best_speedup_compile": None if best_compile is None else {
            "candidate_id": best_compile["candidate_id"],
            "speedup_compile": best_compile["speedup_compile"]},
        "lineage": store.lineage(best["candidate_id"]) if best else [],
        # where the speed came from (kfoundry.runs.credit)
        **credit(store, best["speedup_eager"] if best else None),
        "evaluations": totals["evaluations"],
        "correct": totals["correct"],
        "correctness_rate": totals["correctness_rate"],
        "statuses": totals["statuses"],
        "llm": {k: totals[k] for k in ("llm_calls", "llm_failed_calls", "cost_usd", "unknown_cost_calls",
                                       "input_tokens", "output_tokens", "unknown_token_calls")},
        "wall_time_s": totals["wall_time_s"],
        "device": device_info,
        "versions": versions(best["evaluation"] if best else None),
    }


def size_check_of(store: RunStore, candidate_id: int) -> dict[str, Any] | None:
    """The generalisation check of this candidate (kfoundry.types.SizeCheck as a dict), if it ran."""
    check = store.load_state("size_check")
    if not check or check.get("candidate_id") != candidate_id:
        return None
    return {k: v for k, v in check.items() if k != "candidate_id"}


def graph_note(evaluation: dict[str, Any]) -> str | None:
    """What a best kernel that replays a CUDA graph is to be compared with."""
    if not (evaluation.get("guard") or {}).get("graph_replays"):
        return None
    timing = evaluation.get("timing") or {}
    graphed = (timing.get("baselines") or {}).get(GRAPH_BASELINE) or {}
    ours = (timing.get("candidate") or {}).get("median_ms")
    text = ("its kernels are replayed from a CUDA graph (captured on the first call with each set of input shapes); "
            "torch.compile's like-for-like mode is reduce-overhead (CUDA graphs too)")
    if graphed.get("median_ms") and ours:
        return text + f": {graphed['median_ms']:.4g} ms (ours {graphed['median_ms'] / ours:.3g}x vs it)"
    return text + f": not timed (it is timed after the search on a GPU; or use --baselines eager,compile,{GRAPH_BASELINE})"


def best_header(best: dict[str, Any], check: dict[str, Any] | None) -> str:
    """best.py's first lines: the sizes it was verified at, how, and whether it holds at others."""
    from kfoundry.evaluate.parent.precision_check import describe
    from kfoundry.types import SizeCheck

    evaluation = best["evaluation"]
    settings, correctness = evaluation.get("settings") or {}, evaluation.get("correctness") or {}
    sizes = (check or {}).get("verified_at") or settings.get("set") or {}
    at = ", ".join(f"{k}={v}" for k, v in sizes.items()) or "the problem file's own sizes"
    tolerance, device = correctness.get("tolerance"), evaluation.get("device")
    how = [correctness.get("precision"), tolerance is not None and f"atol=rtol={tolerance:g}", device and f"on {device}"]
    how = ", ".join(part for part in how if part)
    lines = [f"# Kernel Foundry: verified at {at}" + (f" ({how})" if how else "")]
    precision = describe(evaluation.get("precision"))
    if precision:
        lines.append(f"# {precision}")
    if check is not None:
        lines.append("# " + SizeCheck.from_dict(check).summary())
    graphed = graph_note(evaluation)
    if graphed:
        lines.append(f"# {graphed}")
    return "\n".join(line.replace("\n", " ") for line in lines) + "\n"


def write_outputs(store: RunStore, device_info: dict[str, Any]) -> dict[str, Path]:
    """Write the outputs; best.py only when a verified candidate exists (a stale one is removed)."""
    run_dir = store.run_dir
    result = build_result(store, device_info)
    paths = {"result": run_dir / "result.json", "history": run_dir / "history.json"}
    best_path = run_dir / "best.py"
    best = store.final_best()
    if best is not None:
        _write_atomic(best_path, best_header(best, size_check_of(store, best["candidate_id"])) + best["source"])
        paths["best"] = best_path
    elif best_path.exists():
        best_path.unlink()
    _write_atomic(paths["result"], _dump(result))
    _write_atomic(paths["history"], _dump(store.history()))
    return paths
