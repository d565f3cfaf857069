"""Relevant retrieval: a similarity floor, the problem's class first, a score and a reason on each item, a
token budget, and a plain sentence (never padding) when nothing in the library is close enough."""

import textwrap

import pytest

from kfoundry.experts import PromptContext, render
from kfoundry.library import Library
from kfoundry.library.store import SIMILARITY_FLOOR
from kfoundry.problem_signature import problem_class as class_of
from kfoundry.optimize.experience import Experience
from kfoundry.problem_signature import signature

CUMSUM = '''
"""Cumulative sum along the last dim."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.cumsum(x, dim=1)


def get_inputs():
    return [torch.randn(16, 1000)]


def get_init_inputs():
    return []
'''

CONV = '''
"""Conv2d with bias, then ReLU."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.randn(2, 8, 16, 16)]


def get_init_inputs():
    return [8, 16]
'''

GEMM = '''
"""Square matrix multiplication C = A @ B."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(64, 64), torch.randn(64, 64)]


def get_init_inputs():
    return []
'''


@pytest.fixture(scope="module")
def sigs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("problems")
    out = {}
    for name, text in (("cumsum", CUMSUM), ("conv", CONV), ("gemm", GEMM)):
        path = folder / f"{name}.py"
        path.write_text(textwrap.dedent(text))
        out[name] = signature(path)
    return out


def classes(lib, results):
    return [class_of(lib.get(r["id"])["signature"]) for r in results]


def test_the_problems_have_the_classes_the_tests_assume(sigs):
    assert {name: class_of(sig) for name, sig in sigs.items()} == {"cumsum": "scan", "conv": "conv", "gemm": "gemm"}


def test_a_cumsum_retrieves_no_conv_or_gemm_item(lib, sigs):
    results = lib.retrieve(sigs["cumsum"], k=10, semantic=False)
    assert not {"conv", "gemm"} & set(classes(lib, results))
    assert results.floor == SIMILARITY_FLOOR and results.best_similarity is not None


def test_a_gemm_gets_the_gemm_items_first_with_scores_and_reasons(lib, sigs):
    gemm = sigs["gemm"]
    # a kernel of another class (a conv that also runs a matmul) that shares the matmul and matches the words
    # of the query better than the gemm note does: it passes the floor, but comes after the gemm items
    other = {**gemm, "kind": "conv+gemm", "ops": ["aten.convolution", *gemm["ops"]],
             "compute_ops": ["aten.convolution", *gemm["compute_ops"]], "text": "conv gemm convolution mm matmul"}
    lib.add_kernel("Square matmul tiles after a convolution", other, "pass\n",
                   "matrix multiplication matmul square tiles")
    results = lib.retrieve(gemm, k=10, semantic=False)
    found = classes(lib, results)
    assert found[:2] == ["gemm", "gemm"] and found[2:] == ["conv"]
    assert results[2]["score"] > results[1]["score"]  # ranked by class first, then by score
    kernel, note, conv = results
    assert kernel["title"].startswith("GEMM with a fused epilogue") and kernel["type"] == "kernel"
    assert kernel["why"] == f"same class (gemm); no ops in common; similarity {kernel['similarity']:.2f}"
    assert kernel["similarity"] >= SIMILARITY_FLOOR
    assert note["type"] == "insight" and note["why"] == "seed note on gemm problems"
    assert conv["why"].startswith("class conv, not gemm; ops in common: mm;")
    assert all(isinstance(r["score"], float) for r in results)


def test_a_conv_gets_the_conv_kernel_and_nothing_of_other_classes(lib, sigs):
    results = lib.retrieve(sigs["conv"], k=10, semantic=False)
    assert set(classes(lib, results)) == {"conv"}
    assert results[0]["title"].startswith("Conv2d as an implicit GEMM")
    assert results[0]["why"].startswith("same class (conv); ops in common: convolution, relu; similarity ")


def test_below_the_floor_nothing_is_retrieved_whatever_its_text_score(tmp_path, sigs):
    with Library(tmp_path / "lib.sqlite", seed=False) as lib:
        lib.add_kernel("Cumulative sum cumsum scan", sigs["conv"], "pass\n", "cumsum cumulative sum scan prefix")
        lib.add_kernel("gemm", sigs["gemm"], "pass\n", "cumsum")
        results = lib.retrieve(sigs["cumsum"], k=5, semantic=False)
        assert results == [] and results.best_similarity < SIMILARITY_FLOOR
        assert results.best_title in ("Cumulative sum cumsum scan", "gemm")


def test_notes_without_ops_pass_by_class_or_by_naming_it(tmp_path, sigs):
    with Library(tmp_path / "lib.sqlite", seed=False) as lib:
        scan_note = lib.add_insight("Scans: carry the running total between blocks", {"kind": "scan"}, origin="rule",
                                    key="scan")
        lib.add_insight("Reductions: one program per row", {"kind": "reduction"}, origin="rule", key="reduction")
        named = lib.add_insight("A cumsum wants a two-level scan with a carry")
        lib.add_insight("Pointwise chains: fuse everything")
        results = lib.retrieve(sigs["cumsum"], k=5, semantic=False)
        assert {r["id"] for r in results} == {scan_note, named}
        whys = {r["id"]: r["why"] for r in results}
        assert whys == {scan_note: "rule distilled from earlier runs on scan problems",
                        named: "general note that mentions cumsum"}


def _section(user):
    return user[user.index("## Retrieved experience"):user.index("## What to do")]


def test_the_prompt_shows_each_items_score_and_reason(lib, sigs, tmp_path):
    experience = Experience(lib, sigs["gemm"], "run", None).retrieve(5)
    _, user = render("initializer", PromptContext(problem_source=GEMM, problem_name="gemm", experience=experience))
    section = _section(user)
    kernel = experience[0]
    assert f"### 1. {kernel['title']} (from {kernel['source']}) — score {kernel['score']:.2f}; same class (gemm)" \
        in section
    assert "### 2. " in section and "seed note on gemm problems" in section
    assert "Conv2d as an implicit GEMM" not in section and "Convolutions become" not in section
    assert "none yet" not in section and "nothing close enough" not in section


def test_the_budget_cuts_the_items_best_first_in_the_prompt(lib, sigs):
    whole = Experience(lib, sigs["gemm"], "run", None).retrieve(5)
    assert "code" in whole[0] and whole[0]["tokens"] > 500
    tight = Experience(lib, sigs["gemm"], "run", None).retrieve(5, tokens=whole[0]["tokens"] - 1)
    assert tight[0]["id"] == whole[0]["id"] and "code" not in tight[0] and tight[0]["code_left_out"] > 0
    assert [i["id"] for i in tight] == [i["id"] for i in whole]  # the note still fits once the code is out
    _, user = render("initializer", PromptContext(problem_source=GEMM, problem_name="gemm", experience=tight))
    assert "tokens, is left out to keep this section in budget)" in _section(user)
    tiny = Experience(lib, sigs["gemm"], "run", None).retrieve(5, tokens=150)
    assert tiny[-1]["type"] == "note" and "left out to keep this section within 150 tokens" in tiny[-1]["text"]
    assert sum(i.get("tokens", 0) for i in tiny) <= 150


def test_with_nothing_close_enough_the_prompt_says_so_and_shows_nothing(tmp_path, sigs):
    with Library(tmp_path / "lib.sqlite", seed=False) as lib:
        lib.add_kernel("Conv kernel", sigs["conv"], "pass\n", "convolution")
        lib.add_kernel("Gemm kernel", sigs["gemm"], "pass\n", "matmul")
        experience = Experience(lib, sigs["cumsum"], "run", None).retrieve(5)
    assert len(experience) == 1 and experience[0]["type"] == "note" and experience[0]["id"] is None
    best = experience[0]["best_similarity"]
    _, user = render("initializer", PromptContext(problem_source=CUMSUM, problem_name="cumsum",
                                                  experience=experience))
    section = _section(user)
    assert ("The experience library holds nothing close enough to this problem (scan class): no item reaches the "
            f"similarity floor ({SIMILARITY_FLOOR:.2f} for items of its class, 0.35 for others; the closest, ") in section
    assert f'the closest, "{experience[0]["best_title"]}", scores {best:.2f}), so none is shown.' in section
    assert best < SIMILARITY_FLOOR and experience[0]["best_title"] in ("Conv kernel", "Gemm kernel")
    assert "###" not in section and "none yet" not in section
