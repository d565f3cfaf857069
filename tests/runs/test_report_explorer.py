"""The report's run explorer: its data (every candidate's cell, diff, diagnosis, prompt and reply; the
migrations; the final populations), its page (JSON that cannot end its element, scripts allowed by hash
only) and, in headless Chromium driven by selenium, a click on a node that shows the candidate's code,
diff, diagnosis, prompt and reply. With CI=true a missing browser fails the test instead of skipping it."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from pathlib import Path

import pytest

from kfoundry.diagnose import diagnose
from kfoundry.experts.llm_expert import PromptLog
from kfoundry.experts.llm_step import prompt_hash
from kfoundry.runs import RunStore
from kfoundry.runs.report import write_report
from kfoundry.runs.report_explorer import explorer_data, explorer_json
from kfoundry.search.features import cell, features
from tests.runs.test_report_fixture import build_run, evaluation, variant

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
SYSTEM = "You write Triton kernels for the memory expert (fixture)."
USER = "Make candidate {parent} faster: its diagnosis says it is compute-bound (fixture prompt)."
# a reply that tries to end the data's <script> element: it must show as text, and run nothing
REPLY = "Raised BK to 64.\n</script><script>document.title = 'injected'</script>\n```python\n# kernel\n```"
NEW_SOURCE = variant((128, 128, 64), 8, 3)


def _add_llm_candidate(run_dir: Path, ids: dict[str, int]) -> dict[str, int]:
    """Beside the fixture's run: an LLM candidate whose prompt is in prompts/ (written by the search's own
    PromptLog) and whose reply is in run.sqlite, a migration event, and the search's saved populations."""
    with RunStore.open(run_dir, resume=False) as store:
        user = USER.format(parent=ids["i"])
        PromptLog(run_dir / "prompts").write("memory", SYSTEM, user)
        cid = store.add_candidate(NEW_SOURCE, [ids["i"]], "memory", 1, 5, "llm")
        store.add_llm_call(cid, "memory", {"provider": "openai", "model": "fixture-model", "text": REPLY,
                                           "input_tokens": 3000, "output_tokens": 900, "cost_usd": 0.01,
                                           "latency_s": 12.0}, prompt_hash(SYSTEM, user))
        store.event("proposed", id=str(cid), island=1, expert="memory", reason="router: the migrant is compute-bound")
        record = evaluation("ok", 6.5)
        record.diagnosis = diagnose(record, NEW_SOURCE)
        store.finish_evaluation(store.start_evaluation(cid), record)
        store.event("migrated", generation=4, moves=[[str(ids["i"]), 0, 1]])
        store.save_state("search", {"archipelago": {"islands": [
            {"index": 0, "members": [{"id": str(ids["i"]), "fitness": 1.73}, {"id": str(ids["g"]), "fitness": 1.48}]},
            {"index": 1, "members": [{"id": str(cid), "fitness": 1.38}, {"id": str(ids["i"]), "fitness": 1.73}]}]}})
    return {**ids, "new": cid}


@pytest.fixture(scope="module")
def explorer_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("explorer") / "run"
    ids = _add_llm_candidate(run_dir, build_run(run_dir))
    return run_dir, ids, write_report(run_dir)


def test_explorer_data(explorer_run):
    run_dir, ids, _ = explorer_run
    data = explorer_data(run_dir, ids["i"], [ids["a"], ids["e"], ids["g"], ids["i"]])
    nodes = {n["id"]: n for n in data["nodes"]}
    assert len(nodes) == len(ids) and data["islands"] == [0, 1]
    text = data["strings"]
    e = nodes[ids["e"]]
    assert e["diff_parent"] == ids["a"] and "+        BM, BN, BK = 128, 128, 32" in text[e["diff"]]
    assert e["diagnosis"]["focus"] == "compute" and "roofline" in e["diagnosis"]["summary"]
    assert nodes[ids["a"]]["diff"] is None and nodes[ids["a"]]["diff_parent"] is None
    # the MAP-Elites cell, as the search computes it from the code and the diagnosis's bound
    expected = cell(features(NEW_SOURCE, type("D", (), {"bound": nodes[ids["new"]]["diagnosis"]["bound"]})()))
    assert nodes[ids["new"]]["cell"][3:5] == [expected[3], expected[4]] and nodes[ids["new"]]["cell"][0] == "triton"
    new = nodes[ids["new"]]
    (call,) = new["calls"]
    assert call["prompt_file"] == "prompts/0001_memory.md"
    assert text[call["prompt"]["system"]] == SYSTEM and text[call["prompt"]["user"]] == USER.format(parent=ids["i"])
    assert text[call["reply"]] == REPLY and new["reason"].startswith("router: the migrant")
    assert nodes[ids["b"]]["calls"][0]["prompt"] is None  # the fixture's hashes match no prompt file
    assert data["migrations"] == [{"generation": 4, "id": ids["i"], "from": 0, "to": 1}]
    assert {n["id"]: n["populations"] for n in data["nodes"] if n["populations"]} == {
        ids["g"]: [0], ids["i"]: [0, 1], ids["new"]: [1]}
    assert nodes[ids["i"]]["best"] and nodes[ids["g"]]["lineage"] and not nodes[ids["l"]]["lineage"]
    assert data["orphan_calls"] == 1  # the fixture's failed call made no candidate
    embedded = explorer_json(data)
    assert "</script" not in embedded.lower() and "<" not in embedded
    assert json.loads(embedded)["strings"] == data["strings"]


def test_prompt_files_are_matched_by_hash_then_by_the_reply_beside_them(tmp_path):
    from kfoundry.runs.report_explorer import _match_prompt, prompt_files

    log = PromptLog(tmp_path / "prompts")  # the same prompt sent twice, each reply filed beside it (replies/)
    (tmp_path / "replies").mkdir()
    for number, reply in ((1, "first reply"), (2, "second reply")):
        log.write("memory", SYSTEM, USER)
        (tmp_path / "replies" / f"{number:04d}_memory.md").write_text(reply)
    (tmp_path / "prompts" / "0003_other.txt").write_text("a prompt in another layout")
    (tmp_path / "replies" / "0003_other.txt").write_text("its reply\n")
    files = prompt_files(tmp_path)
    same = prompt_hash(SYSTEM, USER)
    assert _match_prompt(files, same, "second reply")["file"] == "prompts/0002_memory.md"  # its own reply
    assert _match_prompt(files, same, None)["file"] == "prompts/0001_memory.md"
    assert _match_prompt(files, "no-such-hash", "its reply")["file"] == "prompts/0003_other.txt"
    assert _match_prompt(files, "no-such-hash", "another reply") is None


def test_page_embeds_the_data_and_allows_its_scripts_by_hash_only(explorer_run):
    _, ids, path = explorer_run
    html = path.read_text()
    csp = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', html).group(1)
    assert "default-src 'none'" in csp and "img-src data:" in csp
    script_src = re.search(r"script-src ([^;]+)", csp).group(1).split()
    assert "'unsafe-inline'" not in script_src and len(script_src) == 2  # checks.js and explorer.js
    bodies = re.findall(r"<script>(.*?)</script>", html, re.DOTALL)
    assert len(bodies) == 2
    for body in bodies:
        digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in script_src
    data = re.search(r'<script type="application/json" id="explorer-data">(.*?)</script>', html, re.DOTALL).group(1)
    assert len(json.loads(data)["nodes"]) == len(ids)
    assert '<section id="explorer">' in html and 'id="ex-tree"' in html


def _browser_or_skip():
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.is_file()]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (the [test] extra)")
    if missing:
        reason = f"no headless browser: missing {', '.join(missing)} (apt-get install chromium chromium-driver)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: {reason}")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-background-networking", "--disable-gpu",
                "--disable-dev-shm-usage", "--no-first-run", "--window-size=1300,1000"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))


def test_clicking_a_node_in_a_headless_browser(explorer_run):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    run_dir, ids, path = explorer_run
    driver = _browser_or_skip()
    try:
        driver.get(path.resolve().as_uri())
        wait = WebDriverWait(driver, 10)
        wait.until(lambda d: d.find_element(By.ID, "explorer").get_attribute("data-explorer") == f"ready:{len(ids)}")
        panel = driver.find_element(By.ID, "ex-panel")

        def click_node(cid: int) -> None:
            driver.find_element(By.CSS_SELECTOR, f'#ex-tree .ex-node[data-id="{cid}"]').click()
            wait.until(lambda d: panel.get_attribute("data-candidate") == str(cid))

        def tab(name: str) -> str:
            panel.find_element(By.CSS_SELECTOR, f'button[data-tab="{name}"]').click()
            wait.until(lambda d: panel.find_element(By.ID, "ex-tab-body").get_attribute("data-tab") == name)
            return panel.find_element(By.ID, "ex-tab-body").text

        assert len(driver.find_elements(By.CSS_SELECTOR, "#ex-tree .ex-node")) == len(ids)
        assert not panel.is_displayed()
        click_node(ids["e"])  # an LLM candidate of the fixture: code, diff from candidate a, diagnosis
        assert f"Candidate {ids['e']}" in panel.text and "1.14x vs eager" in panel.text
        assert "BM, BN, BK = 128, 128, 32" in tab("code")
        diff = tab("diff")
        assert "-        BM, BN, BK = 64, 64, 32" in diff and "+        BM, BN, BK = 128, 128, 32" in diff
        with RunStore.open(run_dir, resume=False) as store:
            summary = store.finished_evaluations()[ids["e"]]["diagnosis"]["summary"]
        assert summary.split(".")[0] in tab("diagnosis")
        assert "No file in the run's prompts/ matches" in tab("prompt")  # the fixture kept no prompt files

        click_node(ids["new"])  # the prompt from prompts/, the reply from run.sqlite, shown as text
        assert "prompts/0001_memory.md" in tab("prompt") and USER.format(parent=ids["i"]) in tab("prompt")
        assert SYSTEM not in tab("prompt")  # folded: an expert's system prompt is the same in each call
        panel.find_element(By.CSS_SELECTOR, "details.ex-system summary").click()
        assert SYSTEM in panel.find_element(By.ID, "ex-tab-body").text
        reply = tab("reply")
        assert "</script><script>document.title = 'injected'</script>" in reply
        assert driver.title.startswith("Kernel Foundry report")  # the reply's script never ran
        assert "+        BM, BN, BK = 128, 128, 64" in tab("diff")

        driver.find_element(By.CSS_SELECTOR, "#ex-migrations a[data-go]").click()  # a migration row
        wait.until(lambda d: panel.get_attribute("data-candidate") == str(ids["i"]))
        assert "migrated to island 1 (gen 4)" in panel.text and "the report's best" in panel.text
        assert "in the final populations of islands 0 and 1" in panel.text
        driver.find_element(By.CSS_SELECTOR, "#ex-grid td.filled").click()  # a MAP-Elites cell selects its best
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#ex-tree .ex-node.incell"))
        errors = [entry for entry in driver.get_log("browser") if entry["level"] in ("SEVERE", "WARNING")]
        assert not errors, errors  # no script error, no CSP refusal
    finally:
        driver.quit()
