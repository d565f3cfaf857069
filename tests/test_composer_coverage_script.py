"""benchmarks/composer_coverage.py on the coverage corpus (benchmarks/coverage): the composer never fails on
it (`composer error (...)` is a bug, not a missing template), and what it lacks is named per problem."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "benchmarks" / "composer_coverage.py"
CORPUS = REPO / "benchmarks" / "coverage"


@pytest.fixture(scope="module")
def coverage():
    spec = importlib.util.spec_from_file_location("composer_coverage_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rows(coverage):
    return coverage.folder_coverage(CORPUS)


def test_the_composer_never_fails_on_the_corpus(rows):
    assert len(rows) == len(list(CORPUS.glob("*.py")))
    assert not [r.name for r in rows if r.crashed]


def test_the_reconstructed_crashes_compose_and_the_rest_name_what_they_lack(rows):
    by_name = {r.name: r for r in rows}
    assert by_name["17_conv3d_groupnorm_min_clamp_dropout"].composed
    assert by_name["18_convtranspose2d_add_min_gelu_multiply"].composed
    for row in rows:
        assert row.composed or (row.unsupported and row.message), row.name


def test_the_script_writes_a_table_and_json(coverage, tmp_path, capsys):
    target = tmp_path / "coverage.json"
    assert coverage.main([str(CORPUS), "--problems", "17,18", "--json", str(target)]) == 0
    document = json.loads(target.read_text())
    (folder,) = document["folders"]
    assert folder["summary"]["problems"] == 2 and folder["summary"]["composed"] == 2
    assert folder["summary"]["composer_errors"] == []
    out = capsys.readouterr().out
    assert "composed 2 of 2; composer errors: none" in out and "17_conv3d_groupnorm_min_clamp_dropout" in out


def test_every_op_the_corpus_names_composes_but_random_numbers_and_gathers(rows):
    left = {r.name: r for r in rows if not r.composed}
    assert set(left) == {"15_randn_noise_forward", "19_windowed_attention"}
    assert "generator" in left["15_randn_noise_forward"].message


def test_the_reach_suite_composes_whole(coverage):
    suite = REPO / "benchmarks" / "reach_suite"
    rows = coverage.folder_coverage(suite)
    assert len(rows) == 6 and all(r.composed for r in rows), [(r.name, r.message) for r in rows]
