"""The run report: rendered from a fixture run store (invented numbers, see test_report_fixture),
from an untimed CPU-style run and from an empty run; checked in headless Chromium when installed."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kfoundry.runs import RunStore
from kfoundry.runs.report import SECTIONS, build_context, write_report
from kfoundry.runs.report_data import gather
from tests.runs.conftest import evaluation
from tests.runs.test_report_fixture import BEST_SOURCE, build_run

EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//|url\(\s*["']?(?:https?:)?//|@import""",
                      re.IGNORECASE)


@pytest.fixture(scope="module")
def fixture_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("report") / "run"
    ids = build_run(run_dir)
    return run_dir, ids, write_report(run_dir)


def test_report_sections_and_self_containment(fixture_run):
    run_dir, _, path = fixture_run
    assert path == run_dir / "report.html"
    html = path.read_text()
    for section in SECTIONS:
        assert f'<section id="{section}">' in html
    assert not EXTERNAL.search(html), EXTERNAL.search(html)
    assert "default-src 'none'" in html  # the page may not fetch anything
    assert html.count('src="data:image/svg+xml;base64,') == 5  # speedup x2, correctness, experts, roofline
    for label in ("NVIDIA H200", "2.11.0+cu130", "3.6.0", "0.0001", "strict", "median of 100 timed trials"):
        assert label in html


def test_best_kernel_diff_and_lineage(fixture_run):
    run_dir, ids, _ = fixture_run
    data = gather(run_dir)
    assert data["best"]["candidate"]["id"] == ids["i"]  # 9.0 / 5.2 ms: the first of the two equal bests
    assert data["first_correct"]["candidate"]["id"] == ids["a"]
    assert [step["id"] for step in data["lineage"]] == [ids["a"], ids["e"], ids["g"], ids["i"]]
    assert [step["expert"] for step in data["lineage"]] == ["initializer", "compute", "tuner", "tuner"]
    second = data["lineage"][1]
    assert second["diagnosis_focus"] == "compute" and "roofline" in second["diagnosis_summary"]
    assert second["gain"] == pytest.approx(14.0 / 7.9) and second["reason"].startswith("router:")
    html = (run_dir / "report.html").read_text()
    assert '<span class="k">def</span>' in html  # pygments-highlighted
    assert '<span class="gd">-        BM, BN, BK = 64, 64, 32</span>' in html  # the diff, highlighted
    assert '<span class="gi">+        BM, BN, BK = 128, 128, 32</span>' in html
    assert "candidate 1 (first correct)" in html and "candidate 9 (best)" in html
    assert BEST_SOURCE.splitlines()[0].strip('"') in html


def test_experts_llm_and_roofline(fixture_run):
    run_dir, _, _ = fixture_run
    context = build_context(run_dir)
    data = context["data"]
    experts = {row["expert"]: row for row in data["experts"]}
    assert experts["compute"]["evaluations"] == 3 and experts["compute"]["correct"] == 2
    assert experts["compute"]["llm_calls"] == 4 and experts["compute"]["llm_failed"] == 1
    assert experts["repair"]["improved"] == 1  # repaired a compile error
    assert experts["repair"]["cost_usd"] is None and experts["repair"]["unknown_cost_calls"] == 1
    models = {row["model"]: row for row in data["llm_models"]}
    assert models["fixture-model"]["cost_usd"] == pytest.approx(8 * 0.021)
    assert models["local-unpriced"]["cost_usd"] is None
    assert context["cost_text"] == "$0.1680 + unknown (1 unpriced call)"
    assert experts["repair"]["cost_text"] == "unknown (1 unpriced call)"
    assert models["fixture-model"]["cost_text"] == "$0.1680"
    roof = data["roofline"]
    assert roof["side"] == "compute" and roof["intensity"] == pytest.approx(2 * 8192 * 4096 * 4096 / roof["bytes"])
    assert roof["achieved_tflops"] == pytest.approx(2 * 8192 * 4096 * 4096 / 5.2e-3 / 1e12)
    assert context["stop_reason"].startswith("max evaluations reached")


def test_the_report_gives_the_problem_s_floor_and_the_fraction_of_it_each_time_reaches(fixture_run):
    """The fixture's fp32 GEMM at tolerance 1e-4 on the H200's datasheet ceilings: three fp16 products per FLOP at
    990 TFLOP/s (0.833 ms) outlast its bytes at 4800 GB/s (0.07 ms); ours 5.2 ms, eager 9.0, torch.compile 8.6."""
    from tests.runs.test_report_fixture import COMPILE_MS, EAGER_MS

    run_dir, _, path = fixture_run
    point = gather(run_dir)["floor"]
    floor_ms = 3 * 2 * 8192 * 4096 * 4096 / 990e12 * 1e3
    floor = point["floor"]
    assert (floor.ms, floor.bound, floor.source) == (pytest.approx(floor_ms), "compute: 3xFP16", "datasheet")
    assert point["ours_of_floor"] == pytest.approx(floor_ms / 5.2)
    assert point["eager_of_floor"] == pytest.approx(floor_ms / EAGER_MS)
    assert point["compile_of_floor"] == pytest.approx(floor_ms / COMPILE_MS)
    html = path.read_text()
    assert "of the speed of light (0.833 ms, 3xFP16)" in html  # the summary's card
    assert "<b>0.833 ms</b>, set by the 3xFP16 roof\n    at the datasheet ceilings" in html
    assert "for fp32 at tolerance 0.0001" in html
    for name, ms, share in (("ours", "5.2", "16%"), ("eager", "9", "9.3%"), ("torch.compile", "8.6", "9.7%")):
        assert f'<tr><td>{name}</td><td class="num">{ms}</td><td class="num">{share}</td></tr>' in html


def test_untimed_run(tmp_path, problem_file):
    with RunStore.create(tmp_path / "run", problem_file, {}, seed=1) as store:
        first = store.add_candidate("x = 1\n", [], "initializer", 0, 0, "llm")
        store.finish_evaluation(store.start_evaluation(first), evaluation("wrong_output"))
        fixed = store.add_candidate("x = 2\n", [first], "repair", 0, 1, "llm")
        record = evaluation("ok")
        record["timing"] = {"runtime_ms": None, "reason": "no GPU: the interpreter is not a performance measurement"}
        store.finish_evaluation(store.start_evaluation(fixed), record)
    html = write_report(tmp_path / "run").read_text()
    assert "first correct candidate (no candidate was timed)" in html
    assert "no roofline point: the run was not timed (no GPU" in html
    assert "No speedups to plot" in html and "n/a" in html
    assert "repaired (parent was wrong_output)" in html
    assert "Speed of light" not in html  # no device facts, no cost: no floor, and nothing broken
    assert "No timed correct candidate: no speedup to credit." in html  # and no generation-0 best: none verified


def test_where_the_speed_came_from(tmp_path, problem_file):
    from tests.runs.test_credit import build_credit_run

    with RunStore.create(tmp_path / "run", problem_file, {}, seed=1) as store:
        ids = build_credit_run(store)
    context = build_context(tmp_path / "run")
    rows = context["credit"]["rows"]
    assert [r["candidate_id"] for r in rows] == [ids["seed"], ids["tuned"], ids["tiled"]]
    assert [r["move_text"] for r in rows] == ["", "tune: BLOCK 1024\u21922048",
                                              "tiles_up: BLOCK_M 64\u2192128, num_warps 4\u21928"]
    html = write_report(tmp_path / "run").read_text()
    section = html.split('<section id="credit">')[1].split("</section>")[0]
    assert "<h2>Where the speed came from</h2>" in section
    assert f"Generation 0's best: candidate {ids['seed']} by <b>initializer</b>, 1.2x" in section
    assert "the final best's gain over it: <b>1.5x</b>" in section
    assert '<td class="num">start &rarr; 1.2x</td>' in section
    assert '<td class="num">1.2x &rarr; 1.5x</td>\n      <td class="num">1.25x</td>' in section
    assert '<td class="num">1.5x &rarr; 1.8x</td>\n      <td class="num">1.2x</td>' in section
    assert "tune: BLOCK 1024\u21922048" in section and "<b>tuner</b>" in section and "<b>genome</b>" in section
    assert f"{ids['tiled']} &larr; {ids['tuned']}" in section
    assert f"<tr><td>{ids['sideways']} &larr;" not in section  # its 1.4x raised nothing


def test_token_counts_a_provider_did_not_report_read_unknown_not_zero(tmp_path, problem_file):
    with RunStore.create(tmp_path / "run", problem_file, {}, seed=1) as store:
        first = store.add_candidate("x = 1\n", [], "initializer", 0, 0, "llm")
        store.finish_evaluation(store.start_evaluation(first), evaluation("ok"))
        store.add_llm_call(first, "initializer", {"provider": "cmd", "model": "silent", "input_tokens": None,
                                                  "output_tokens": None, "cost_usd": None}, "p1")
        second = store.add_candidate("x = 2\n", [first], "memory", 0, 1, "llm")
        store.finish_evaluation(store.start_evaluation(second), evaluation("ok"))
        store.add_llm_call(second, "memory", {"provider": "openai", "model": "counted", "input_tokens": 900,
                                              "output_tokens": 120, "cost_usd": None}, "p2")
    data = gather(tmp_path / "run")
    experts = {row["expert"]: row for row in data["experts"]}
    assert experts["initializer"]["input_tokens"] is None and experts["initializer"]["unknown_token_calls"] == 1
    assert experts["memory"]["input_tokens"] == 900 and experts["memory"]["unknown_token_calls"] == 0
    models = {row["model"]: row for row in data["llm_models"]}
    assert models["silent"]["output_tokens"] is None
    html = write_report(tmp_path / "run").read_text()
    assert "unknown / unknown" in html  # the initializer's row: not "0 / 0"
    assert "900 + ?" in html  # the total: what was reported, and calls that reported nothing


def test_empty_run(tmp_path, problem_file):
    RunStore.create(tmp_path / "run", problem_file, {}, seed=1).close()
    html = write_report(tmp_path / "run").read_text()
    assert "No correct candidate in this run" in html and "nothing to place on the roofline" in html


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-background-networking",
                           "--disable-gpu", "--no-first-run", "--enable-logging=stderr", "--v=0",
                           "--virtual-time-budget=5000", *args],
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.skipif(CHROMIUM is None and os.environ.get("CI") != "true",
                    reason="no Chromium binary (apt-get install chromium)")
def test_report_in_a_headless_browser(fixture_run, tmp_path):
    assert CHROMIUM is not None, "CI=true and no Chromium binary (.ci/run installs Debian's chromium)"
    _, _, path = fixture_run
    url = Path(path).resolve().as_uri()
    dom = _chromium("--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    assert not console, console  # no script error, no blocked (external) load
    for section in SECTIONS:
        assert f'id="{section}"' in dom.stdout
    match = re.search(r'data-images="([^"]+)"', dom.stdout)
    assert match and match.group(1) == "ok:5", match  # every plot decoded
    shot = tmp_path / "report.png"
    _chromium("--window-size=1280,4000", f"--screenshot={shot}", url)
    assert shot.is_file() and shot.stat().st_size > 50_000


def test_roofline_without_a_diagnosis_and_without_flops():
    from kfoundry.runs import report_plots
    from kfoundry.runs.report_data import roofline_point
    from tests.runs.test_report_fixture import evaluation as gpu_evaluation

    record = gpu_evaluation("ok", 5.2).to_dict()
    point = roofline_point(record, None)  # computed from cost, device facts and runtime
    assert point["side"] == "compute" and point["ceilings"] == "datasheet (fixture)"
    record["cost"]["flops"] = 0  # a pointwise problem: the flop counter counts none
    memory_only = roofline_point(record, None)
    assert memory_only["intensity"] is None and memory_only["side"] == "memory"
    assert report_plots.roofline(memory_only, "NVIDIA H200").startswith("data:image/svg+xml;base64,")
    assert report_plots.roofline({"reason": "not timed"}, "cpu") is None
