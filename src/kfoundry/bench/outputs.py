"""A bench's files: bench.json (rewritten after every problem: what --resume reads), bench.csv (KernelBench's
eval_results.json and baseline file: kfoundry.bench.kernelbench)."""

from __future__ import annotations

import csv
import io
import json
import math
import os
from pathlib import Path
from typing import Any

from kfoundry.bench import floor
from kfoundry.bench.results import ProblemResult
from kfoundry.errors import UsageError

BENCH_JSON = "bench.json"
BENCH_CSV = "bench.csv"
BENCH_HTML = "bench.html"
FORMAT = "kfoundry-bench/1"
# new columns go at the end: readers that take columns by position keep working
CSV_COLUMNS = ("number", "name", "status", "speedup_eager", "speedup_compile", "runtime_ms", "eager_ms",
               "compile_ms", "evaluations", "duration_s", "run_dir", "message", "compiled", "calls_pytorch",
               "policy_warnings", "samples", "correct_samples", "best_sample", "out_of_resource", *floor.FIELDS,
               "generation0_speedup", "gain_over_generation0")


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_json(out: Path, document: dict[str, Any]) -> Path:
    path = out / BENCH_JSON
    write_atomic(path, json.dumps(_finite(document), indent=2, allow_nan=False, default=str) + "\n")
    return path


def load_results(out: Path) -> dict[str, ProblemResult]:
    """Every problem result an earlier bench in `out` recorded, by problem name."""
    path = out / BENCH_JSON
    if not path.is_file():
        return {}
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path} cannot be read ({exc}): move it away or choose another --out") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise UsageError(f"{path} is not a kfoundry bench file: choose another --out")
    found = {}
    try:
        for item in document.get("problems", []) + document.get("kept", []):
            result = ProblemResult.from_dict(item)
            found[result.name] = result
    except (TypeError, AttributeError, ValueError) as exc:  # valid JSON, damaged records
        raise UsageError(f"{path} is damaged ({type(exc).__name__}: {exc}): move it away or choose another "
                         "--out") from None
    return found


def write_csv(out: Path, results: list[ProblemResult]) -> Path:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_COLUMNS)
    for result in results:
        row = result.to_dict()
        row.update(calls_pytorch=result.calls_pytorch, policy_warnings=";".join(result.policy_warnings),
                   samples=len(result.samples) if result.samples else None,
                   correct_samples=sum(s.correct for s in result.samples) if result.samples else None)
        writer.writerow(["" if row.get(k) is None else row[k] for k in CSV_COLUMNS])
    path = out / BENCH_CSV
    write_atomic(path, buffer.getvalue())
    return path
