"""The bench page (bench.html): labels, metrics, per-problem table and speedups plot, one
self-contained file like the run report (the same stylesheet and plotting)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from kfoundry.bench.figures import metric_rows, ms_text, speedup_text
from kfoundry.bench.outputs import BENCH_HTML, write_atomic
from kfoundry.bench.results import timed
from kfoundry.bench.settings import describe
from kfoundry.runs.report_html import render_page
from kfoundry.runs.report_plots import bench_speedups

if TYPE_CHECKING:
    from kfoundry.bench.runner import BenchReport


def render_bench(report: BenchReport) -> str:
    rows = []
    for result in report.results:
        report_file = report.out / result.run_dir / "report.html" if result.run_dir else None
        rows.append({
            "number": "" if result.number is None else result.number, "name": result.name, "status": result.status,
            "correct": result.correct, "message": result.message,
            "speedup_eager": speedup_text(result.speedup_eager, result.correct),
            "speedup_compile": speedup_text(result.speedup_compile, result.correct),
            "runtime_ms": ms_text(result.runtime_ms), "eager_ms": ms_text(result.eager_ms),
            "compile_ms": ms_text(result.compile_ms), "duration_s": result.duration_s,
            "report": f"{result.run_dir}/report.html" if report_file and report_file.exists() else None,
            "reused": result.name in report.reused,
        })
    metrics = report.metrics()
    method = report.config.bench.method
    return render_page(
        "bench.html.j2", title=f"Kernel Foundry bench: {report.suite.root.name} ({method})",
        labels=report.labels(), suite=str(report.suite.directory), method=method, rows=rows,
        metric_rows=metric_rows(metrics), pending=report.pending, skipped=report.suite.skipped,
        complete=report.complete, timed=timed(report.results), plot=bench_speedups([r.to_dict() for r in report.results]),
        settings=json.dumps(describe(report.config), indent=2, default=str))


def write_bench_html(report: BenchReport) -> Path:
    path = report.out / BENCH_HTML
    write_atomic(path, render_bench(report))
    return path
