"""The static guard's findings and verdicts, exactly, on the whole guard corpus: the guard fixtures, the
sandbox's attack files, the evaluator's candidate fixtures, the examples' kernels, the library's seed
kernels, and every candidate the composer writes for the project's problems (its golden sources).

Written from the code before the guard's analysis was split into a package; a change meant to alter a
finding reruns this with KFOUNDRY_UPDATE_GOLDEN=1 and commits tests/golden/guard_verdicts.json with it."""

from __future__ import annotations

import json
from pathlib import Path

from kfoundry.guard.findings import POLICIES
from kfoundry.guard.policy import split
from kfoundry.guard.static import check_source
from tests.experts.composer.test_golden import golden_sources
from tests.helpers import GOLDEN, assert_golden

ROOT = Path(__file__).resolve().parents[2]
CORPUS_GLOBS = ("tests/fixtures/guard/*.py", "tests/fixtures/sandbox/*.py", "tests/fixtures/candidates/*.py",
                "examples/*/kernel.py", "src/kfoundry/library/seed/*/*.py")


def judged(source: str, filename: str) -> dict:
    findings = check_source(source, filename)
    verdicts = {}
    for policy in POLICIES:
        failures, warnings = split(findings, policy)
        verdicts[policy] = "cheating" if failures else ("warnings" if warnings else "clean")
    return {"findings": [[f.rule, f.line, f.message, list(f.evidence)] for f in findings], "verdicts": verdicts}


def corpus() -> dict[str, tuple[str, str]]:
    """name -> (source, the file name the guard is given)."""
    found = {}
    for pattern in CORPUS_GLOBS:
        for path in sorted(ROOT.glob(pattern)):
            name = str(path.relative_to(ROOT))
            found[name] = (path.read_text(encoding="utf-8"), name)
    for golden in sorted((GOLDEN / "composer").glob("*.txt")):
        for candidate, source in golden_sources(golden.read_text(encoding="utf-8")):
            name = f"composer/{golden.stem}/{candidate}"
            found[name] = (source, name)
    return found


def test_the_guard_finds_what_it_found() -> None:
    files = corpus()
    assert len(files) > 350  # the fixtures and every composed candidate
    record = {name: judged(source, filename) for name, (source, filename) in files.items()}
    assert_golden(GOLDEN / "guard_verdicts.json", json.dumps(record, indent=1, sort_keys=True) + "\n")
