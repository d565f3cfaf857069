"""The report's plots, drawn with matplotlib (Agg) and embedded as SVG data URIs: no file, no
network. Each function returns the URI, or None when there is nothing to draw."""

from __future__ import annotations

import base64
import io
import math
from typing import Any

import matplotlib

matplotlib.use("Agg")  # before pyplot: no display, no GUI toolkit
import matplotlib.pyplot as plt
import matplotlib.ticker

STATUS_COLOURS = {"ok": "#2e7d32", "wrong_output": "#c62828", "compile_error": "#6a1b9a", "runtime_error": "#ef6c00",
                  "cheating": "#000000", "timeout": "#757575", "crash": "#ad1457"}
STYLE = {"svg.fonttype": "none", "svg.hashsalt": "kfoundry-report", "font.size": 9, "axes.grid": True,
         "grid.alpha": 0.3, "figure.dpi": 100}


def figure_uri(fig) -> str:
    """The figure as an SVG data URI (closed afterwards)."""
    buffer = io.BytesIO()
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "kfoundry-report"}):
        fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return "data:image/svg+xml;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _figure(width: float = 7.5, height: float = 3.2):
    with plt.rc_context(STYLE):
        return plt.subplots(figsize=(width, height))


def speedup_over_evaluations(evaluations: list[dict[str, Any]], key: str = "speedup_eager") -> str | None:
    """Each verified candidate's speedup in the order evaluations finished, one colour per island,
    with the best so far as a step line."""
    points = [e for e in evaluations if e["status"] == "ok" and e.get(key) is not None]
    if not points:
        return None
    with plt.rc_context(STYLE):
        fig, ax = _figure()
        for island in sorted({e["island"] for e in points}):
            mine = [e for e in points if e["island"] == island]
            ax.scatter([e["index"] for e in mine], [e[key] for e in mine], s=18, label=f"island {island}", zorder=3)
        best, xs, ys = None, [], []
        for e in evaluations:
            value = e.get(key) if e["status"] == "ok" else None
            if value is not None:
                best = value if best is None else max(best, value)
            if best is not None:
                xs.append(e["index"])
                ys.append(best)
        ax.step(xs, ys, where="post", color="#333333", linewidth=1.2, label="best so far")
        ax.axhline(1.0, color="#999999", linewidth=0.8, linestyle="--")
        ax.set_xlabel("evaluation (in the order they finished)")
        ax.set_ylabel("speedup vs eager" if key == "speedup_eager" else "speedup vs torch.compile")
        if max(e[key] for e in points) / max(min(e[key] for e in points), 1e-9) > 20:
            ax.set_yscale("log")
        ax.legend(loc="best", fontsize=8)
        return figure_uri(fig)


def correctness_over_time(evaluations: list[dict[str, Any]], window: int = 10) -> str | None:
    """Cumulative share of correct evaluations, and over the last `window` ones."""
    if not evaluations:
        return None
    with plt.rc_context(STYLE):
        fig, ax = _figure(height=2.8)
        xs = [e["index"] for e in evaluations]
        flags = [e["status"] == "ok" for e in evaluations]
        cumulative = [sum(flags[: i + 1]) / (i + 1) for i in range(len(flags))]
        rolling = [sum(flags[max(0, i + 1 - window): i + 1]) / len(flags[max(0, i + 1 - window): i + 1])
                   for i in range(len(flags))]
        marker = "o" if len(xs) <= 3 else None  # a line needs two points: show lone ones
        ax.plot(xs, cumulative, color="#1565c0", marker=marker, label="all so far")
        ax.plot(xs, rolling, color="#ef6c00", alpha=0.8, marker=marker, label=f"last {window}")
        ax.set_xlim(0.5, len(xs) + 0.5)
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True, min_n_ticks=1))
        colours = [STATUS_COLOURS.get(e["status"], "#999999") for e in evaluations]
        ax.scatter(xs, [-0.06] * len(xs), c=colours, s=10, marker="|", clip_on=False)
        ax.set_ylim(-0.1, 1.05)
        ax.set_xlabel("evaluation (in the order they finished); ticks below: verdict colour")
        ax.set_ylabel("correct")
        ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
        ax.legend(loc="best", fontsize=8)
        return figure_uri(fig)


def expert_outcomes(experts: list[dict[str, Any]]) -> str | None:
    """Per expert, its evaluations split into correct and failed."""
    rows = [r for r in experts if r["evaluations"]]
    if not rows:
        return None
    with plt.rc_context(STYLE):
        fig, ax = _figure(height=0.45 * len(rows) + 1.0)
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True, min_n_ticks=1))
        names = [r["expert"] for r in rows]
        correct = [r["correct"] for r in rows]
        failed = [r["evaluations"] - r["correct"] for r in rows]
        ax.barh(names, correct, height=0.6, color=STATUS_COLOURS["ok"], label="correct")
        ax.barh(names, failed, height=0.6, left=correct, color="#c62828", alpha=0.75, label="failed")
        ax.set_ylim(len(rows) - 0.2, -0.8)  # first expert on top, room for the legend
        ax.set_xlabel("evaluations")
        ax.legend(loc="lower right", fontsize=8)
        return figure_uri(fig)


def roofline(point: dict[str, Any], device: str) -> str | None:
    """The best kernel under the device's roofs: a log-log roofline when FLOPs are counted, else
    achieved bandwidth against the peak (no FLOPs: the memory roof is the only one)."""
    if "reason" in point or not point.get("achieved_gbs"):
        return None
    bandwidth, peak_tflops = point.get("peak_bandwidth_gbs"), point.get("peak_tflops")
    intensity, achieved_tflops = point.get("intensity"), point.get("achieved_tflops")
    with plt.rc_context(STYLE):
        if intensity and achieved_tflops and bandwidth and peak_tflops:
            fig, ax = _figure(height=3.6)
            ridge = peak_tflops * 1e3 / bandwidth
            low = min(intensity, ridge) / 20
            high = max(intensity, ridge) * 20
            xs = [low * (high / low) ** (i / 200) for i in range(201)]
            ax.plot(xs, [min(bandwidth * x / 1e3, peak_tflops) for x in xs], color="#333333",
                    label=f"roof: {bandwidth:.0f} GB/s, {peak_tflops:.0f} TFLOP/s ({point.get('peak_key')})")
            ax.scatter([intensity], [achieved_tflops], color="#c62828", zorder=4, s=40,
                       label=f"best kernel: {achieved_tflops:.3g} TFLOP/s at {intensity:.3g} FLOP/byte")
            ax.axvline(ridge, color="#999999", linewidth=0.8, linestyle=":")
            ax.set_xscale("log")
            ax.set_yscale("log")
            plain = matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:g}")
            for axis, subs in ((ax.xaxis, (1.0,)), (ax.yaxis, (1.0, 2.0, 5.0))):
                axis.set_major_locator(matplotlib.ticker.LogLocator(subs=subs))
                axis.set_major_formatter(plain)
                axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            ax.set_xlabel("arithmetic intensity (FLOP / byte, minimum bytes)")
            ax.set_ylabel("TFLOP/s")
            ax.set_title(f"roofline of {device}", fontsize=9)
            ax.legend(loc="lower right", fontsize=8)
            return figure_uri(fig)
        if not bandwidth:
            return None
        fig, ax = _figure(height=1.9)
        achieved = point["achieved_gbs"]
        ax.barh(["bandwidth"], [bandwidth], color="#dddddd", label=f"peak {bandwidth:.0f} GB/s")
        ax.barh(["bandwidth"], [achieved], color="#1565c0", label=f"best kernel {achieved:.0f} GB/s "
                                                                   f"({achieved / bandwidth:.0%})")
        ax.set_xlabel("GB/s (minimum bytes moved / runtime)")
        ax.set_title(f"memory roof of {device} (no FLOPs counted for this problem)", fontsize=9)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.42), ncol=2, fontsize=8, frameon=False)
        if not math.isfinite(achieved):
            return None
        return figure_uri(fig)


def bench_speedups(rows: list[dict[str, Any]]) -> str | None:
    """Per problem, its speedup vs eager and vs torch.compile (correct, timed problems)."""
    timed = [r for r in rows if r["status"] == "ok" and r.get("speedup_eager") is not None]
    if not timed:
        return None
    with plt.rc_context(STYLE):
        fig, ax = _figure(width=8, height=0.35 * len(timed) + 1.2)
        names = [r["name"] for r in timed]
        positions = list(range(len(timed)))
        ax.barh([p - 0.2 for p in positions], [r["speedup_eager"] for r in timed], height=0.4, label="vs eager",
                color="#1565c0")
        compiled = [r.get("speedup_compile") or 0.0 for r in timed]
        if any(compiled):
            ax.barh([p + 0.2 for p in positions], compiled, height=0.4, label="vs torch.compile", color="#ef6c00")
        ax.set_yticks(positions, names)
        ax.axvline(1.0, color="#333333", linewidth=0.8, linestyle="--")
        ax.invert_yaxis()
        ax.set_xlabel("speedup (x)")
        ax.legend(loc="lower right", fontsize=8)
        return figure_uri(fig)
