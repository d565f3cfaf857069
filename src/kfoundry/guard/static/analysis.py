"""One run of the static guard over a parsed file: the kind inference to its fixed point, the rules on the
forward scope, then one walk over the whole tree in which every node goes to the host, file and C++ rules in
turn (findings on one rule and line merge their evidence in the order the walk meets them)."""

from __future__ import annotations

import ast

from ..findings import Finding
from .cpp_sources import CppSources
from .file_rules import FileRules
from .fixpoint import solve
from .forward_rules import ForwardRules
from .host_rules import HostRules
from .inference import Inference
from .program import Program
from .report import Report
from .scope import forward_scope
from .syntax import str_const


def run(tree: ast.Module, source: str) -> list[Finding]:
    program = Program(tree, source)
    inference = Inference(program)
    solve(inference)
    report = Report(source)
    forward = ForwardRules(inference, report)
    for f in forward_scope(inference):
        forward.check(f)
    # docstrings and other bare string statements are prose: no source is compiled from them
    prose = {n.value for n in program.nodes if isinstance(n, ast.Expr) and str_const(n.value) is not None}
    visitors = (HostRules(program, report).visit,
                FileRules(inference, report, program.kernel_nodes(), prose).visit,
                CppSources(program, report, prose).visit)
    for n in program.nodes:
        for visit in visitors:
            visit(n)
    return report.ordered()
