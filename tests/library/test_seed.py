import json

import pytest

from kfoundry.library import Library
from kfoundry.library.seed import MANIFEST, kernel_dirs, seed_kernels
from kfoundry.problem_signature import signature

SMALL = {"gemm_epilogue": dict(batch_size=4, in_features=16, out_features=8),
         "row_softmax": dict(batch_size=4, dim=40), "layernorm": dict(batch_size=4, dim=32),
         "row_reduction": dict(batch_size=4, dim=40), "pointwise_chain": dict(batch_size=4, dim=32),
         "conv2d_implicit_gemm": dict(batch_size=1, in_channels=2, out_channels=4, height=6, width=6)}


def test_seed_has_the_six_kernels_with_notes():
    names = {d.name for d in kernel_dirs()}
    assert names == set(SMALL)
    for item in seed_kernels():
        assert "ModelNew" in item["source"] and "@triton.jit" in item["source"]
        assert item["notes"].startswith("# ") and "When to use it" in item["notes"]
        assert item["signature"]["kind"]


@pytest.mark.parametrize("slug", sorted(SMALL))
def test_manifest_matches_the_seed_problems(slug):
    recorded = {e["slug"]: e["signature"] for e in json.loads(MANIFEST.read_text())}[slug]
    fresh = signature(kernel_dirs()[[d.name for d in kernel_dirs()].index(slug)] / "problem.py", SMALL[slug])
    assert fresh["ops"] == recorded["ops"] and fresh["kind"] == recorded["kind"]


def test_fresh_library_is_seeded_once(tmp_path):
    path = tmp_path / "lib.sqlite"
    with Library(path) as lib:
        first = lib.stats()
        assert first["by_type"]["kernel"] == 6 and first["by_origin"] == {"seed": first["items"]}
        lib._set_meta("seed_version", 0)  # as if a newer seed shipped: loading again adds nothing twice
        lib.db.commit()
    with Library(path) as lib:
        assert lib.stats()["items"] == first["items"]


def test_seed_kernels_run_in_the_interpreter():
    # the seeded row-reduction kernel is new (the others are examples/ kernels, tested there)
    import torch

    from kfoundry.problem import load_module

    folder = [d for d in kernel_dirs() if d.name == "row_reduction"][0]
    module = load_module(folder / "kernel.py", (folder / "kernel.py").read_text(), "seed_row_reduction")
    x = torch.randn(3, 37)
    torch.testing.assert_close(module.ModelNew()(x), x.mean(dim=-1, keepdim=True), rtol=1e-5, atol=1e-5)
