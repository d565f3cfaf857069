"""Suites of problems scored by a method: discovery, per-problem runs, metrics (correctness,
fast_p, geometric-mean speedups), bench.json / bench.csv / bench.html, and `kfoundry bench`."""

from kfoundry.bench.metrics import summarize
from kfoundry.bench.runner import BenchReport, run_bench
from kfoundry.bench.settings import METHODS, BenchSettings
from kfoundry.bench.suite import Suite, SuiteProblem, discover

__all__ = ["METHODS", "BenchReport", "BenchSettings", "Suite", "SuiteProblem", "discover", "run_bench", "summarize"]
