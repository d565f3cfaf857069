"""The bench page (bench.html): labels, metrics (with the recipe for comparing with published numbers),
per-problem table, samples and speedups plot, one self-contained file like the run report (its base
template, stylesheet and plotting; the page's own template, bench_page.html.j2, lives beside this module)."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2

from kfoundry.bench.config import describe
from kfoundry.bench.figures import (FLOOR_MEANING, RECIPE, floor_text, gain_text, metric_rows, ms_text,
                                     samples_ok, share_text, speedup_text)
from kfoundry.bench.floor import FRACTION_FIELDS
from kfoundry.bench.outputs import BENCH_HTML, write_atomic
from kfoundry.bench.results import timed
from kfoundry.runs.report_html import environment, render_page
from kfoundry.runs.report_plots import bench_speedups

if TYPE_CHECKING:
    from kfoundry.bench.report import BenchReport


@lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    """The page's template (bench_page.html.j2, beside this module) in the run report's environment, where
    it finds its base template and filters; render_page takes it whole (Jinja's get_template returns a
    Template unchanged)."""
    shared = environment()
    here = jinja2.FileSystemLoader(str(resources.files("kfoundry.bench")))
    return shared.overlay(loader=jinja2.ChoiceLoader([here, shared.loader])).get_template("bench_page.html.j2")


def _report_link(report: BenchReport, run_dir: str | None) -> str | None:
    return f"{run_dir}/report.html" if run_dir and (report.out / run_dir / "report.html").exists() else None


def render_bench(report: BenchReport) -> str:
    rows, samples = [], []
    for place, result in enumerate(report.results, start=1):
        floor = result.floor_record()
        rows.append({
            "number": place if result.number is None else result.number, "name": result.name, "status": result.status,
            "correct": result.correct, "message": result.message, "compiled": "yes" if result.compiled else "no",
            "samples_ok": samples_ok(result),
            "speedup_eager": speedup_text(result.speedup_eager, result.correct),
            "speedup_compile": speedup_text(result.speedup_compile, result.correct),
            "runtime_ms": ms_text(result.runtime_ms), "eager_ms": ms_text(result.eager_ms),
            "compile_ms": ms_text(result.compile_ms), "duration_s": result.duration_s,
            "calls_pytorch": result.calls_pytorch, "policy_warnings": ", ".join(result.policy_warnings),
            "report": _report_link(report, result.run_dir), "reused": result.name in report.reused,
            "floor": floor_text(floor), "floor_source": floor["floor_source"],
            "of_floor": [share_text(floor[key]) for key in FRACTION_FIELDS],
            "credit": [gain_text(result.generation0_speedup), speedup_text(result.speedup_eager, result.correct),
                       gain_text(result.gain_over_generation0)],
        })
        for sample in result.samples if len(result.samples) > 1 else []:
            samples.append({
                "name": result.name, "sample_id": sample.sample_id, "best": sample.sample_id == result.best_sample,
                "status": sample.status, "correct": sample.correct, "compiled": "yes" if sample.compiled else "no",
                "speedup_eager": speedup_text(sample.speedup_eager, sample.correct),
                "runtime_ms": ms_text(sample.runtime_ms), "calls_pytorch": sample.calls_pytorch,
                "message": sample.message, "report": _report_link(report, sample.run_dir),
            })
    metrics = report.metrics()
    method = report.config.bench.method
    numbers = {p.name: p.number for p in report.suite.problems}
    options = report.config.eval
    return render_page(
        _template(), title=f"Kernel Foundry bench: {report.suite.root.name} ({method})",
        labels=report.labels(), suite=str(report.suite.directory), method=method, rows=rows, samples=samples,
        metric_rows=metric_rows(metrics), pending=[("" if numbers.get(n) is None else numbers[n], n)
                                                   for n in report.pending],
        skipped=report.suite.skipped, complete=report.complete, timed=timed(report.results),
        plot=bench_speedups([r.to_dict() for r in report.results]), recipe=RECIPE[0].upper() + RECIPE[1:],
        floors=any(r.floor for r in report.results), floor_meaning=FLOOR_MEANING[0].upper() + FLOOR_MEANING[1:],
        credit=any(r.generation0_speedup is not None for r in report.results),
        policy=options.policy, tolerance=f"{options.atol:g}", correct=metrics["correct"],
        calls_pytorch=metrics["passed_calling_pytorch"],
        settings=json.dumps(describe(report.config), indent=2, default=str))


def write_bench_html(report: BenchReport) -> Path:
    path = report.out / BENCH_HTML
    write_atomic(path, render_bench(report))
    return path
