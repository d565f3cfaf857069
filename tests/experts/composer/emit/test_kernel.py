"""Kernel writing: parameters fed by host expressions, launches, masks, merged dims, unravelled coordinates."""

import torch

from kfoundry.experts.composer.emit.host import HostContext
from kfoundry.experts.composer.emit.kernel import (
    Access,
    KernelWriter,
    Space,
    allocate,
    mask_of,
    merge_dims,
    space_numel,
    space_sizes,
    unravel,
)
from kfoundry.experts.composer.ir.builder import GraphBuilder
from kfoundry.experts.composer.plan.fusion import plan


def _values():
    b = GraphBuilder()
    x = b.input("x", 0, torch.randn(2, 3, 4, 5))
    p = b.param("p", torch.randn(3, 1, 1))
    y = b.op("add", [x, p])
    b.graph.outputs = [y]
    return b.graph, x, p, y


def test_parameters_are_shared_per_host_expression_and_launch_wraps():
    kw = KernelWriter("_k")
    first = kw.arg("x_ptr", "x")
    assert kw.arg("x_ptr", "x") == first and kw.arg("x_ptr", "y") == "x_ptr_2"
    kw.constexpr("BLOCK", "1024")
    kw.line("pid = tl.program_id(0)")
    source = kw.source()
    assert source.startswith("@triton.jit\ndef _k(x_ptr, x_ptr_2, BLOCK: tl.constexpr):")
    launch = kw.launch("(4,)", {"num_warps": "4"})
    assert launch.strip().startswith("_k[(4,)](") and "BLOCK=1024, num_warps=4)" in launch
    assert kw.local("pid") == "pid_2"  # reserved names are never reused


def test_masks_are_deduplicated():
    assert mask_of(["row_ok", None, "row_ok & col_ok"]) == "row_ok & col_ok"
    assert mask_of([None]) is None


def test_merge_dims_where_every_tensor_reads_alike():
    _graph, x, p, y = _values()
    space = (2, 3, 4, 5)
    accesses = [(x, (0, 1, 2, 3)), (p, (1, None, None)), (y, (0, 1, 2, 3))]
    entries, merged = merge_dims([[0, 1, 2, 3]], accesses, space)
    assert entries == [[0], [1], [2, 3]]  # H and W merge; C cannot merge with either (p runs along C only)
    assert merged == {x, y}
    entries, _ = merge_dims([[0, 1], [2, 3]], [(x, (0, 1, 2, 3))], (2, 1, 4, 5))
    assert entries == [[0], [2, 3]]  # size-1 dims drop out


def test_unravel_and_accesses():
    graph, x, p, y = _values()
    the_plan = plan(graph)
    group = the_plan.groups[0]
    host = HostContext(the_plan)
    lines = allocate(host, group.exports)
    assert lines[0].strip().startswith("add = torch.empty(x.shape") and y in host.allocated
    sizes = space_sizes(group, host)
    assert sizes == ["add.shape[0]", "add.shape[1]", "add.shape[2]", "add.shape[3]"]
    assert space_numel(group, host, sizes) == "add.numel()"
    kw = KernelWriter("_k")
    coords = unravel(kw, "offs", [[0], [1], [2, 3]], sizes, "i")
    assert coords == ["i0", "i1", "i2"]
    assert kw.lines[0].strip() == "i2 = offs % size_i2"
    space = Space([[0], [1], [2, 3]], coords, ["mask"] * 3, ["flat"] * 3, {"flat": "offs * 0"}, {"flat": "mask"})
    access = Access(kw, host, space, {x})
    var, axes = access.load(p, (1, None, None))
    assert var == "p" and axes == {"flat"} and "tl.load(p_ptr + i1 * p_s0, mask=mask, other=0.0)" in kw.lines[-1]
    access.load(x, (0, 1, 2, 3))
    assert "x_c = x.contiguous()" in kw.prelude[0]
    # a value that spans the block but whose tensor has no coordinate (a scalar output): a zero offset
    access.store(y, (), "total", span=frozenset({"flat"}))
    assert kw.lines[-1].strip() == "tl.store(add_ptr + offs * 0, total.to(add_ptr.dtype.element_ty), mask=mask)"


def _rebound_parameters(source: str) -> list[tuple[str, str]]:
    """(kernel, parameter) for every @triton.jit kernel in `source` whose body assigns one of its own parameters."""
    import ast

    found = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef) or not any("jit" in ast.unparse(d) for d in fn.decorator_list):
            continue
        params = {a.arg for a in fn.args.args}
        for node in ast.walk(fn):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For)) else []
            found += [(fn.name, n.id) for t in targets for n in ast.walk(t) if isinstance(n, ast.Name) and n.id in params]
    return found


def test_no_template_rebinds_a_kernel_parameter():
    """A template's literal locals are reserved: a clamp's bounds named `low` and `high` once shadowed the split
    GEMM loop's accumulators (every fp16x3 variant of gemm_suite 3 failed to compile on the GPU: "Loop-carried
    variable high has initial type fp32"). Checked on every golden candidate and on that problem's variants."""
    from pathlib import Path

    from kfoundry.experts.composer import compose
    from tests.experts.composer.test_golden import golden_sources
    from tests.helpers import GOLDEN

    assert _rebound_parameters("@triton.jit\ndef k(x, low):\n    low = x\n") == [("k", "low")]
    for path in sorted((GOLDEN / "composer").glob("*.txt")):
        for name, source in golden_sources(path.read_text()):
            assert _rebound_parameters(source) == [], (path.name, name)
    suite = Path(__file__).resolve().parents[4] / "benchmarks" / "gemm_suite"
    problem = suite / "3_linear_scale_residual_clamp_logsumexp_mish.py"
    composed = compose(problem, max_variants=8)
    assert any("fp16x3" in c.name for c in composed.candidates)
    for candidate in composed.candidates:
        assert _rebound_parameters(candidate.source) == [], candidate.name
