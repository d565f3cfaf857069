"""scripts/render_prompts.py: the prompt showcase. Its files are golden (tests/fixtures/prompts/rendered): a prompt
that changes without them being rendered again fails here, so every prompt change is reviewed as a diff. The
rendered prompts are also checked for what the issue asks of them."""

import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "render_prompts.py"
GOLDEN = REPO / "tests" / "fixtures" / "prompts" / "rendered"
UPDATE = ".venv/bin/python scripts/render_prompts.py (then review the diff of tests/fixtures/prompts/rendered)"


@pytest.fixture(scope="module")
def showcase(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("render_prompts_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path_factory.mktemp("showcase")
    module.render_showcase(out)
    return {path.relative_to(out).as_posix(): path.read_text(encoding="utf-8") for path in sorted(out.rglob("*.md"))}


def test_the_prompts_are_the_golden_files(showcase):
    golden = {path.relative_to(GOLDEN).as_posix(): path.read_text(encoding="utf-8")
              for path in sorted(GOLDEN.rglob("*.md"))}
    assert sorted(showcase) == sorted(golden), f"prompt files added or gone: run {UPDATE}"
    changed = [name for name in showcase if showcase[name] != golden[name]]
    assert not changed, f"prompts changed ({', '.join(changed)}): run {UPDATE}"


def _users(showcase):
    return {name: text for name, text in showcase.items() if not name.startswith("system/")}


def test_each_islands_initializer_has_its_own_strategy(showcase):
    for problem in ("masked_cumsum", "linear_gelu_scale", "conv_maxpool_relu"):
        sections = [showcase[f"{problem}/initializer_island{i}.md"].split("## Your strategy: ")[1].split("\n## ")[0]
                    for i in range(3)]
        assert len(set(sections)) == 3
        names = [section.split("\n")[0] for section in sections]
        for name, section in zip(names, sections):
            others = section.split("do not write one of them:")[1]
            assert f"- {name}:" not in others and all(f"- {n}:" in others for n in names if n != name)


def test_no_prompt_states_an_unmeasured_speed_and_every_one_gives_the_shapes_under_test(showcase):
    for name, text in _users(showcase).items():
        assert not re.search(r"\b1(\.0+)?x\s*->\s*1(\.0+)?x", text), name
        assert "correctness is checked at these shapes" in text, name
        assert "speed is not measured in this run" in text, name


def test_the_advice_fits_the_problem_class(showcase):
    users = _users(showcase)
    scan = [text for name, text in users.items() if name.startswith("masked_cumsum/")]
    assert all("For a scan problem:" in text for text in scan)
    assert not any("For a gemm problem" in text or "64 to 256 per side" in text for text in scan)  # no GEMM advice
    assert "For a gemm problem:" in users["linear_gelu_scale/compute.md"]
    assert "For a conv problem:" in users["conv_maxpool_relu/compute.md"]


def test_no_retrieved_item_lies_below_the_floor(showcase):
    from kfoundry.library.store import OTHER_CLASS_FLOOR, SIMILARITY_FLOOR

    seen = 0
    for name, text in _users(showcase).items():
        section = text.split("## Retrieved experience")[1].split("\n## ")[0]
        for heading in re.findall(r"^### \d+\. .*$", section, flags=re.M):
            match = re.search(r"; (same class|class \w+, not \w+) \(?\w*\)?.*similarity (\d\.\d+)$", heading)
            if match is None:
                assert "seed note on" in heading or "note from" in heading, heading  # kind-only notes: same class
                continue
            floor = SIMILARITY_FLOOR if match.group(1).startswith("same class") else OTHER_CLASS_FLOOR
            assert float(match.group(2)) >= floor, (name, heading)
            seen += 1
    assert seen  # the GEMM and conv prompts retrieve seed kernels


def test_every_prompt_has_a_roofline_says_which_request_it_is_and_none_repeats(showcase):
    users = _users(showcase)
    assert {name.split("/")[0] for name in users} >= {"conv_groupnorm_pool", "causal_attention"}
    for name, text in users.items():
        assert re.search(r"^Roofline estimate: .* at the problem file's own sizes; ", text, flags=re.M), name
        assert "This request: the first request to the " in text, name
    assert len(set(users.values())) == len(users)  # no two prompts are the same


def test_no_prompt_shows_repository_paths_or_opaque_generated_names(showcase):
    for name, text in _users(showcase).items():
        for pattern in (r"benchmarks/", r"src/kfoundry", r"\btests/", r"\bsym_size\d", r"_rest_\d", r"\bkd_rest\b"):
            assert not re.search(pattern, text), (name, pattern)


def test_the_framing_follows_the_bound(showcase):
    users = _users(showcase)
    assert "# Task: cut the memory traffic that holds the arithmetic back" in users["conv_groupnorm_pool/memory.md"]
    assert "compute-bound on NVIDIA H200" in users["causal_attention/compute.md"]
    assert "# Task: move fewer bytes, and move them well" in users["masked_cumsum/memory.md"]  # memory-bound
    assert "register use and shared memory are not measured in this run" in users["linear_gelu_scale/compute.md"]
    assert "Its kernels:" in users["conv_groupnorm_pool/memory.md"]


def test_a_render_that_fails_leaves_the_files_it_would_have_replaced(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("render_prompts_failing", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    earlier = tmp_path / "system" / "triton_whole.md"
    earlier.parent.mkdir()
    earlier.write_text("the reviewed prompt")

    def broken(*args):
        raise ModuleNotFoundError("No module named 'torch'")  # as under a Python without the project's packages

    monkeypatch.setattr(module, "_render_problems", broken)
    with pytest.raises(ModuleNotFoundError):
        module.render_showcase(tmp_path)
    assert earlier.read_text() == "the reviewed prompt"
