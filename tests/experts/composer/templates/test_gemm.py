"""The GEMM template: Linear / matmul / bmm with the pointwise ops after them in the epilogue."""

import pytest

from kfoundry.evaluate.shared.device_facts import target_facts
from kfoundry.experts.composer.compose import capture
from kfoundry.experts.composer.genome import Genome
from kfoundry.experts.composer.plan.fusion import plan
from kfoundry.experts.composer.read.trace import load_sample
from kfoundry.experts.composer.templates.gemm import configs, dot_precisions
from kfoundry.experts.tunables import apply_values, find_tunables
from tests.experts.composer.helpers import (
    EXAMPLE_SIZES,
    check_variants,
    compose_ok,
    example,
    first,
    fixture,
    submit,
    submit_all,
    verdict,
)

CASES = {
    "linear_gelu_scale": (fixture("linear_gelu_scale"), {}),
    "matmul_bmm": (fixture("matmul_bmm"), {}),
    "example": (example("linear_epilogue"), EXAMPLE_SIZES["linear_epilogue"]),
}


@pytest.fixture(scope="module")
def composed():
    out = {}
    for name, (problem, sizes) in CASES.items():
        # examples: composed at full size, evaluated small (sizes come from tensors); matmul_bmm: the 8 variants
        # test_tf32_variants_copy_an_n_contiguous_b_k_major_first reads too (the first 4 are the default's)
        result = compose_ok(problem, max_variants=8 if name == "matmul_bmm" else 4)
        out[name] = (result, submit(problem, first(result).source, sizes, label=name))
    return out


def test_epilogues_are_fused(composed):
    linear = first(composed["linear_gelu_scale"][0])
    assert linear.name == "gemm_epilogue_bm128_bn128_bk64_w8_fp16x3"
    gemm = [k for k in linear.source.split("@triton.jit") if "def _gemm_" in k]
    assert len(gemm) == 1  # bias, GELU, scale and clamp in the epilogue
    assert "tl.erf(" in gemm[0] and "tl.minimum(" in gemm[0]
    # fp16x3: both operands split, three fp16 products, the low ones apart, then each row's and column's factor
    assert "= _split_fp16x3(x_mat, -1)" in linear.source and "= _split_fp16x3(fc_weight_t, -2)" in linear.source
    assert "acc_lo = tl.dot(a, b_lo, acc_lo)" in gemm[0] and "acc_lo = tl.dot(a_lo, b, acc_lo)" in gemm[0]
    assert "acc = (acc + acc_lo * (1.0 / 2048.0)) * row_inv[:, None] * col_inv[None, :]" in gemm[0]
    tf32x3 = composed["linear_gelu_scale"][0].candidates[2]
    assert '"tf32x3" if x.dtype == torch.float32' in tf32x3.source  # three TF32 products: near-fp32 accuracy
    both = first(composed["matmul_bmm"][0]).source
    # residual + bias + tanh; relu / 2; softmax and logsumexp over the Linear's features
    assert both.count("def _gemm_") == 3 and "def _pointwise" not in both and "def _row" not in both
    kernels = [k for k in both.split("@triton.jit") if "def _gemm_" in k]
    assert any("residual" in k and "tanh" in k for k in kernels)
    assert any("pid_b = tl.program_id(1)" in k for k in kernels)  # bmm: one grid row per batch
    assert any("tl.sum(tl.where(n_ok, " in k for k in kernels) and "BN=max(16, triton.next_power_of_2(" in both
    for result, _ in composed.values():
        check_variants(result)


@pytest.mark.parametrize("name", sorted(CASES))
def test_gemm_candidates_pass_the_evaluator(composed, name):
    verdict(composed[name][1])


def test_dot_precision_follows_the_reference_and_the_tolerance():
    assert dot_precisions("fp32", None) == ["tf32x3", "ieee"]
    assert dot_precisions("fp32", 1e-2) == ["tf32x3", "tf32", "ieee"]
    assert dot_precisions("fp32", None, tf32_fair=True) == ["tf32x3", "tf32", "ieee"]
    assert dot_precisions("fp16", None) == ["default"]
    linear, = plan(capture(load_sample(fixture("linear_gelu_scale"))).graph).groups
    # the first variants (the first population): fp16x3 in two tiles, then TF32x3 to fall back on
    h200 = target_facts("H200")  # the GPU the order was measured on
    assert [c["precision"] for c in configs(linear, device=h200)][:4] == ["fp16x3", "fp16x3", "tf32x3", "tf32x3"]
    assert [c["precision"] for c in configs(linear, "fp16")][:4] == ["default"] * 4  # fp16 operands: one product
    reduced = plan(capture(load_sample(fixture("matmul_bmm"))).graph).groups[0]
    assert reduced.reduced  # a softmax over the Linear's features: one tile spans them, no split
    assert [c["precision"] for c in configs(reduced)][:4] == ["tf32x3", "tf32x3", "ieee", "tf32x3"]
    loose = [c["precision"] for c in configs(reduced, "fp32", 0.05)]
    assert loose[0] == "tf32x3" and "tf32" in loose  # a loose tolerance needs no IEEE fallback


def test_the_search_has_fp16x3_tiles_of_several_shapes_after_the_lead_tiles():
    """The genome's tile moves need somewhere to go at the fastest fp32-accurate precision: every fp16x3 tile fits
    the H100 and the H200 and the first four configurations (the first population's) stay as they were."""
    linear, = plan(capture(load_sample(fixture("linear_gelu_scale"))).graph).groups
    for gpu in ("H100", "H200"):
        fitted = configs(linear, device=target_facts(gpu))
        split = [c for c in fitted if c["precision"] == "fp16x3"]
        assert [(c["BM"], c["BN"], c["BK"]) for c in fitted[:2]] == [(128, 128, 64), (128, 128, 32)]
        assert len({(c["BM"], c["BN"]) for c in split}) >= 4 and len(split) >= 6
        assert all(c in fitted[4:] for c in split[2:])  # after the lead tiles
    reduced = plan(capture(load_sample(fixture("matmul_bmm"))).graph).groups[0]
    assert "fp16x3" not in {c["precision"] for c in configs(reduced)}  # one tile spans the features: no split


def test_a_persistent_kernel_takes_tiles_in_turn_and_passes_the_evaluator():
    """The persistent gene: one program per multiprocessor (4 on the CPU) looping over the tiles; 600 rows in
    tiles of 128 give the first program two, the last tile a partial one."""
    problem, sizes = fixture("linear_gelu_scale"), {"batch_size": 120}
    result = compose_ok(problem, set_values=sizes, max_variants=1)
    (options,) = result.space.options.values()
    (persistent,) = [c for c in options["gemm_0"] if c.get("persistent") and not c.get("tma")]
    assert persistent["precision"] == "fp16x3"  # the search's, after every lead tile
    source, label = result.space.build(Genome((), {"gemm_0": persistent}, False))
    assert label.endswith("_persistent") and "for tile in range(tl.program_id(0), num_tiles, tl.num_programs(0)):" \
        in source and "_programs_resident(x)),)]" in source
    verdict(submit(problem, source, sizes, label="persistent", guard_runs=False))
    fp16 = compose_ok(problem, precision="fp16", max_variants=1).space.options[()]["gemm_0"]
    assert [c["precision"] for c in fp16 if c.get("persistent")] == ["default"]


LONG_K = '''
import torch
from torch import nn

batch, m, n, k = 2, 40, 24, 2100


class Model(nn.Module):
    def forward(self, a, b):
        return torch.sigmoid(torch.bmm(a, b) * 0.05)


def get_inputs():
    return [torch.randn(batch, m, k), torch.randn(batch, k, n)]


def get_init_inputs():
    return []
'''


def test_split_k_shares_a_long_k_among_programs_and_passes_the_evaluator(tmp_path):
    """The split-K gene, offered where the output's tiles leave the GPU idle and K is long: a bmm of 2 x 40 x 24
    outputs over K = 2100 (partial tiles, K's 33 steps not a multiple of the split) leads with a split-K variant;
    its first launch writes each share's partial sums, the second adds them and runs the epilogue. At 16 shares of
    3 steps the last five have no steps at all. Square outputs of many tiles (gemm_suite's) are not offered it."""
    path = tmp_path / "long_k.py"
    path.write_text(LONG_K)
    result = compose_ok(path, max_variants=2)
    second = result.candidates[1]
    assert second.config["gemm_0"]["SPLIT_K"] == 4 and second.name.endswith("_fp16x3_splitk4")
    assert second.source.count("_gemm_bmm_mul_sigmoid_0_kernel[") == 2
    assert "PHASE=1" in second.source and "PHASE=2" in second.source and "META['SPLIT_K'])]" in second.source
    (options,) = result.space.options.values()
    assert sorted({c.get("SPLIT_K", 1) for c in options["gemm_0"]}) == [1, 4, 8, 16]
    steps = result.space.neighbours(result.candidates[0].genome, "split_k")  # more programs a tile first
    assert [g.configs["gemm_0"]["SPLIT_K"] for g in steps] == [4, 4, 8, 8, 16]
    sixteen, _ = result.space.build(steps[-1])
    for evaluation in submit_all(path, [second.source, sixteen], label="split_k", guard_runs=False).result():
        verdict(evaluation)
    sizes = {"in_features": 4096, "out_features": 4096, "batch_size": 512}
    square, = plan(capture(load_sample(fixture("linear_gelu_scale"), sizes)).graph).groups
    assert all("SPLIT_K" not in c for c in configs(square))


def test_a_tma_variant_reads_the_split_parts_through_descriptors_and_falls_back_where_rows_are_unaligned():
    """The descriptor gene: the split parts' tiles through tensor descriptors where K's rows are 16-byte aligned
    (K % 8 == 0, checked on the host for each call), the pointer loads otherwise. A batched product's descriptors
    are made by each program at its batch's matrices (not in a persistent loop: that configuration is not offered
    it). Judged at K = 40 (descriptors) and K = 44, the batched one at K = 40."""
    problem = fixture("linear_gelu_scale")
    result = compose_ok(problem, max_variants=1)
    (options,) = result.space.options.values()
    tma = [c for c in options["gemm_0"] if c.get("tma")]
    assert len(tma) == 3 and all(c["precision"] == "fp16x3" for c in tma) and any(c.get("persistent") for c in tma)
    source, label = result.space.build(Genome((), {"gemm_0": tma[0]}, False))
    assert label.endswith("_fp16x3_tma") and "triton.set_allocator(_tma_scratch)" in source
    assert "TMA=x.shape[2] % 8 == 0" in source and source.count("tl.make_tensor_descriptor(") == 4
    aligned, unaligned = (submit(problem, source, {"in_features": k}, label="tma", guard_runs=False) for k in (40, 44))
    verdict(aligned)
    verdict(unaligned)
    groups = plan(capture(load_sample(fixture("matmul_bmm"))).graph).groups
    bmm, = [g for g in groups if g.kind == "gemm" and g.anchor.args[0].rank == g.anchor.args[1].rank == 3]
    linear = groups[1]
    batched = [c for c in configs(bmm) if c.get("tma")]
    assert len(batched) == 2 and not any(c.get("persistent") for c in batched)
    assert any(c.get("tma") and c.get("persistent") for c in configs(linear))
    bmm_problem = fixture("matmul_bmm")
    space = compose_ok(bmm_problem, max_variants=1).space
    options = space.options[()]
    assert [c for c in options["gemm_2"] if c.get("tma")] == batched  # gemm_2: the bmm
    genome = Genome((), {"gemm_0": options["gemm_0"][0], "gemm_1": options["gemm_1"][0], "gemm_2": batched[0]}, False)
    source, _ = space.build(genome)
    assert "tl.make_tensor_descriptor(a_ptr + pid_b * stride_a0," in source
    verdict(submit(bmm_problem, source, {}, label="tma_batched", guard_runs=False))
    assert any(c.get("tma") for c in configs(linear, device=target_facts("H100")))
    assert not any(c.get("tma") for c in configs(linear, device=target_facts("A100")))  # no copy engine


def test_fp16_candidates_use_the_default_dot(composed):
    result = compose_ok(fixture("linear_gelu_scale"), precision="fp16")
    assert "input_precision" not in first(result).source


def test_tf32_variants_copy_an_n_contiguous_b_k_major_first(composed):
    # the tensor cores' TF32 path takes B tiles contiguous along K: a (K, N) row-major B is copied first
    both = composed["matmul_bmm"][0]
    tf32x3 = both.candidates[2]  # TF32x3 for the two GEMMs the split takes (fp16x3 in the first two)
    forward = tf32x3.source.split("def forward(")[1]
    assert forward.count("= _k_major(") == 2  # the matmul's weight and the bmm's second input, not the Linear's
    assert "def _k_major(" in tf32x3.source and "def _channels_last_kernel(" in tf32x3.source
    assert "_k_major(" not in first(both).source  # the split writes K-major parts itself
    variants = both.candidates  # composed with max_variants=8
    assert len(variants) == 8
    # IEEE dots for the matmul and the bmm (the Linear, whose weight needs no copy, in TF32x3): no copy
    ieee = [c for c in variants if c.config["gemm_1"]["precision"] == c.config["gemm_2"]["precision"] == "ieee"]
    assert ieee and all("_k_major(" not in c.source for c in ieee)
    assert "_k_major" not in first(composed["linear_gelu_scale"][0]).source  # weight.T is K-contiguous already


TRIANGLES = '''
import torch
from torch import nn

n, m = 70, 45


class Model(nn.Module):
    def forward(self, a, b, c):
        product = a @ b
        upper = torch.triu(product, diagonal=3) * 2.0
        lower = torch.relu(torch.tril(torch.bmm(c, c.transpose(1, 2)), diagonal=-5))
        other = b.T @ a.T
        both = torch.triu(other) + other  # the product read past the mask: every tile computes
        return upper, lower, both


def get_inputs():
    return [torch.randn(n, m), torch.randn(m, n), torch.randn(2, n, m)]


def get_init_inputs():
    return []
'''


@pytest.fixture(scope="module")
def triangles(tmp_path_factory):
    """TRIANGLES composed once, and its candidates judged two at a time: the first (fp16x3), the two TF32x3 ones
    (64-row tiles: whole tiles past a triangle), and the second (fp16x3 with BK 32) retiled to 32 x 64 tiles
    (test_square_tiles_are_tunable_and_a_retiled_candidate_still_passes), so every variant is judged and the one
    whose copy is judged retiled skips tiles too."""
    path = tmp_path_factory.mktemp("triangles") / "triangles.py"
    path.write_text(TRIANGLES)
    result = compose_ok(path, max_variants=4)
    second = result.candidates[1].source
    tunables = {t.name: t for t in find_tunables(second) if t.base in ("BM", "BN")}
    retiled = apply_values(second, list(tunables.values()), {name: 32 if "BM" in name else 64 for name in tunables})
    sources = [c.source for c in result.candidates]
    # an fp16x3 variant (its operands split, most of the interpreted time) and a TF32x3 one in each evaluator; for
    # their correctness, without the guard's extra runs (helpers.py: the GEMM template's candidates in `composed`
    # are judged with them)
    evaluations = [submit_all(path, sources[0:3:2], guard_runs=False),
                   submit_all(path, sources[3:4] + ([retiled] if retiled else []), guard_runs=False)]
    return {"result": result, "tunables": tunables, "retiled": retiled, "evaluations": evaluations}


def test_tiles_a_triangle_keeps_nothing_of_skip_their_products_and_pass_the_evaluator(triangles):
    result = triangles["result"]
    source = first(result).source
    kernels = source.split("@triton.jit")
    skipping = [k for k in kernels if "k_stop = tl.where(" in k]
    assert len([k for k in kernels if "def _gemm_" in k]) == 3
    assert len(skipping) == 2 and "pid_n * BN + BN - 1 - pid_m * BM < 3" in skipping[0]
    assert "pid_n * BN - (pid_m * BM + BM - 1) > -5" in skipping[1]
    assert len(result.candidates) == 4
    first_and_third, fourth_and_retiled = (future.result() for future in triangles["evaluations"])
    for evaluation in first_and_third + fourth_and_retiled[:1]:  # 64- to 128-row tiles
        verdict(evaluation)


def test_square_tiles_are_tunable_and_a_retiled_candidate_still_passes(triangles):
    """The grid reads BM and BN from the launch (a META function): 128 x 128 tiles are two tunables the tuner
    can tell apart, and changing one changes the grid with it."""
    tunables = triangles["tunables"]
    assert len(tunables) == 6 and {t.value for t in tunables.values()} == {128}  # three GEMMs
    retiled = triangles["retiled"]
    assert retiled is not None and "BM=32, BN=64" in retiled
    verdict(triangles["evaluations"][1].result()[1])
