"""kfoundry.diagnose.lint: static rules on a candidate's Triton kernels, located by line and kernel."""

import textwrap

from kfoundry.diagnose.lint import lint_findings, lint_kernels
from tests.helpers import marker_line


def _rules(source: str) -> list[tuple[str, int, str]]:
    return [(i["rule"], i["line"], i["kernel"]) for i in lint_kernels(textwrap.dedent(source))]


def test_unmasked_load_in_a_fixture(fixtures_dir):
    path = fixtures_dir / "diagnose" / "error_oob_segfault.py"
    items = lint_kernels(path.read_text())
    assert [(i["rule"], i["line"], i["kernel"]) for i in items] == [
        ("load-without-mask", marker_line(path, "# BUG"), "_affine_kernel")]
    assert items[0]["text"].startswith("x = tl.load(x_ptr + offs * stride)")
    assert "has no mask" in items[0]["message"]


def test_run_time_block_size_and_unmasked_accesses(candidates_dir):
    path = candidates_dir / "triton_not_constexpr.py"
    line = marker_line(path, "KERNEL ERROR HERE")
    items = lint_kernels(path.read_text())
    assert [(i["rule"], i["line"]) for i in items] == [
        ("block-not-constexpr", line), ("load-without-mask", line + 1), ("store-without-mask", line + 2)]
    assert "`n` sets a block shape (tl.arange)" in items[0]["message"]


def test_small_dot_from_the_launch_and_nothing_else(fixtures_dir):
    path = fixtures_dir / "diagnose" / "error_dot_small.py"
    items = lint_kernels(path.read_text())
    assert [(i["rule"], i["line"], i["kernel"]) for i in items] == [
        ("dot-small-block", marker_line(path, "# BUG"), "_linear_silu_scale_kernel")]
    assert "dimension of 8 (< 16)" in items[0]["message"]


def test_clean_kernels_give_nothing(examples_dir, candidates_dir):
    for path in [*examples_dir.glob("*/kernel.py"), candidates_dir / "affine_ok.py", candidates_dir / "bad_mask.py"]:
        assert lint_kernels(path.read_text()) == [], path


def test_literal_shapes_not_powers_of_two():
    assert _rules("""
        import triton
        import triton.language as tl
        BLOCK_ROWS = 24

        @triton.jit
        def k(x_ptr, n, BLOCK: tl.constexpr):
            a = tl.arange(0, 100)
            b = tl.arange(0, BLOCK_ROWS)
            c = tl.arange(16, 48)
            acc = tl.zeros((BLOCK, 48), dtype=tl.float32)

        def launch(x):
            k[(1,)](x, 10, BLOCK=96)
            k[(1,)](x, 10, BLOCK=128)
    """) == [("arange-not-pow2", 8, "k"), ("arange-not-pow2", 9, "k"), ("shape-not-pow2", 11, "k"),
             ("launch-not-pow2", 14, "k")]


def test_block_parameter_through_a_local_and_in_tl_zeros():
    assert _rules("""
        import triton.language as tl
        from triton import jit

        @jit
        def k(x_ptr, n_cols, BLOCK_M: tl.constexpr):
            width = n_cols
            cols = tl.arange(0, width)
            acc = tl.zeros((BLOCK_M, n_cols), dtype=tl.float32)
    """) == [("block-not-constexpr", 8, "k"), ("block-not-constexpr", 9, "k")]


def test_masks_others_block_pointers_and_scalar_loads():
    items = lint_kernels(textwrap.dedent("""
        import triton
        import triton.language as tl

        @triton.jit
        def k(x_ptr, s_ptr, y_ptr, n, BLOCK: tl.constexpr):
            scale = tl.load(s_ptr)
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offs, mask=offs < n)
            total = tl.sum(x, axis=0)
            p = tl.make_block_ptr(x_ptr, (n,), (1,), (0,), (BLOCK,), (0,))
            z = tl.load(p, boundary_check=(0,))
            w = tl.load(x_ptr + offs, offs < n, 0.0)
            tl.store(y_ptr + offs, x * scale)
            tl.store(y_ptr + offs, w, offs < n)
    """))
    assert [(i["rule"], i["line"]) for i in items] == [("load-mask-without-other", 9), ("store-without-mask", 14)]
    assert "they reach tl.sum at line 10" in items[0]["message"]


def test_aliases_of_triton_language():
    assert _rules("""
        import triton
        from triton import language as lang

        @triton.jit
        def k(x_ptr, BLOCK: lang.constexpr):
            offs = lang.arange(0, BLOCK)
            lang.store(x_ptr + offs, 0.0)
    """) == [("store-without-mask", 8, "k")]


def test_unparsable_source_gives_nothing():
    assert lint_kernels("def broken(:\n") == []


def test_findings_carry_location_and_direction(fixtures_dir):
    path = fixtures_dir / "diagnose" / "error_oob_segfault.py"
    (finding,) = lint_findings(path.read_text(), str(path))
    assert (finding.category, finding.severity) == ("lint", "warning")
    assert finding.location.file == str(path)
    assert finding.location.line == marker_line(path, "# BUG")
    assert finding.location.function == "_affine_kernel"
    assert "mask=offs < n" in finding.direction
    assert finding.data["rule"] == "load-without-mask"
