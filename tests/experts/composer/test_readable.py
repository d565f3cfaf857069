"""Composed candidates are shown to a language model as parents to edit: their names say what they hold (no
tracer names like `sym_size3`, no `i_rest_2`), their comments point at nothing in this repository, and no
expression chooses between two equal branches."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from kfoundry.experts.composer.compose import compose
from tests.experts.composer.helpers import FIXTURES, TESTS
from tests.experts.composer.test_golden import golden_sources
from tests.helpers import GOLDEN

CONV_GROUPNORM_POOL = TESTS.parent / "benchmarks" / "conv_suite" / "14_conv2d_groupnorm_scale_maxpool_clamp.py"
SMALL = {"batch_size": 2, "height": 18, "width": 18, "in_channels": 4, "out_channels": 8, "num_groups": 2}
UNSUPPORTED = {"dropout_train", "pointwise_broadcast", "unsupported_fft"}  # fixtures the composer writes nothing for
OPAQUE = re.compile(r"sym_[a-z]+\d*|.*_rest(_\d+)?")  # a tracer's name of a host number; an unravel's leftover
REPOSITORY = re.compile(r"benchmarks/|src/kfoundry|\btests/|\b(templates|plan|emit|read)/|\w\.py\b")


def unreadable(source: str) -> list[str]:
    """What makes a candidate hard to read, one line each (none: readable)."""
    tree = ast.parse(source)
    found = []
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    names |= {node.arg for node in ast.walk(tree) if isinstance(node, ast.arg)}
    names |= {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    found += [f"opaque name {name}" for name in sorted(names) if OPAQUE.fullmatch(name)]
    found += [f"repository path in: {line.strip()}" for line in source.splitlines() if REPOSITORY.search(line)]
    found += [f"equal branches: {ast.unparse(node)}" for node in ast.walk(tree)
              if isinstance(node, ast.IfExp) and ast.dump(node.body) == ast.dump(node.orelse)]
    return found


def test_the_check_sees_what_it_looks_for():
    assert unreadable("sym_size3 = x.shape[0]\ni_rest_2 = offs // n\nkd_rest = t // 3\n") == [
        "opaque name i_rest_2", "opaque name kd_rest", "opaque name sym_size3"]
    assert unreadable("# 12% faster (benchmarks/layout_copy.py)\nx = 1\n") == [
        "repository path in: # 12% faster (benchmarks/layout_copy.py)"]
    assert unreadable('p = "tf32" if x.dtype == torch.float32 else "tf32"\n') == [
        "equal branches: 'tf32' if x.dtype == torch.float32 else 'tf32'"]
    assert unreadable('batch = x.shape[0]\ni_rest_after_dim3 = offs // n\np = "ieee" if a else "tf32"\n') == []


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.py")) + [CONV_GROUPNORM_POOL], ids=lambda p: p.stem)
def test_composed_candidates_read_as_what_they_do(path: Path):
    result = compose(path, set_values=SMALL if path == CONV_GROUPNORM_POOL else None, max_variants=2)
    if path.stem in UNSUPPORTED:
        assert not result.candidates
        return
    assert result.candidates, result.message
    for candidate in result.candidates:
        assert unreadable(candidate.source) == [], candidate.name
    if path == CONV_GROUPNORM_POOL:  # the host's sizes and the kernels are named after what they are
        source = result.candidates[0].source
        assert "batch = x.shape[0]" in source and "channels = conv_weight.shape[0]" in source
        assert re.search(r"def _conv2d_group_norm_stats_0_kernel\(", source), source
        assert re.search(r"def _max_pool2d_group_norm\w*_0_kernel\(", source), source


def test_every_golden_candidate_reads_as_what_it_does():
    for golden in sorted((GOLDEN / "composer").glob("*.txt")):
        for name, source in golden_sources(golden.read_text(encoding="utf-8")):
            assert unreadable(source) == [], f"{golden.name}: {name}"
