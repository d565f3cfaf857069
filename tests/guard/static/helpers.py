"""Snippets for the static guard's tests: a candidate file's head (imports, a Triton kernel, its launcher),
ModelNew built around a forward body, and assertions that a rule fires at the line marked `# <-` (`// <-`
inside C++ sources) or does not fire. Pure AST: nothing here imports or runs a candidate."""

import textwrap
from pathlib import Path

from kfoundry.guard import Finding, check_source
from kfoundry.guard.findings import RULES

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures"

HEAD = '''\
import math
import os
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask, other=0.0) * 2.0, mask=mask)


def _launch(x, y):
    n = x.numel()
    _kernel[(triton.cdiv(n, 256),)](x, y, n, BLOCK=256)
'''


def src(body: str) -> str:
    """HEAD (imports, a kernel, a launch helper) followed by the dedented body."""
    return HEAD + "\n\n" + textwrap.dedent(body).strip("\n") + "\n"


def model(forward: str, init: str = "", extra: str = "") -> str:
    """HEAD, then `extra`, then a ModelNew with the given __init__ additions and forward body."""
    init_lines = textwrap.indent(textwrap.dedent(init).strip("\n"), " " * 8) if init.strip() else ""
    fwd_lines = textwrap.indent(textwrap.dedent(forward).strip("\n"), " " * 8)
    text = textwrap.dedent(extra).strip("\n") + "\n\n\n" if extra.strip() else ""
    text += "class ModelNew(nn.Module):\n    def __init__(self, scale=2.0):\n        super().__init__()\n"
    text += "        self.scale = scale\n" + (init_lines + "\n" if init_lines else "")
    text += "\n    def forward(self, x):\n" + fwd_lines + "\n"
    return src(text)


def marked_line(source: str) -> int:
    lines = [i for i, line in enumerate(source.splitlines(), 1) if "# <-" in line or "// <-" in line]
    assert len(lines) == 1, "mark exactly one line with # <- (or // <- in C++)"
    return lines[0]


def render(findings: list[Finding]) -> str:
    return "\n".join(f.render() + f"  {f.evidence}" for f in findings) or "(no findings)"


def assert_fires(source: str, rule: str) -> Finding:
    assert rule in RULES
    findings = check_source(source)
    line = marked_line(source)
    hits = [f for f in findings if f.rule == rule and f.line == line]
    assert hits, f"expected [{rule}] at line {line}; got:\n{render(findings)}\n---\n{source}"
    hit = hits[0]
    assert hit.message and hit.evidence and all(isinstance(e, str) and e for e in hit.evidence)
    return hit


def assert_clean(source: str, rule: str | None = None):
    findings = [f for f in check_source(source) if rule is None or f.rule == rule]
    assert not findings, f"expected no {'findings' if rule is None else rule}; got:\n{render(findings)}\n---\n{source}"
