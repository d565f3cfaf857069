"""kfoundry.experts.replies: replies as models write them (tests/fixtures/llm/replies/, for
problems/affine.py) become candidate files, or failures a person and the next prompt can use."""

import pytest

from kfoundry.experts import parse_reply
from kfoundry.guard import check_source
from tests.experts.helpers import MISSING_TAIL, REPLIES, matches_affine

PARENT = MISSING_TAIL.read_text()


def _reply(name: str, parent: str | None = PARENT):
    return parse_reply((REPLIES / f"{name}.md").read_text(), parent)


@pytest.mark.parametrize("name,kind", [
    ("affine_correct", "file"), ("affine_bare_fence", "file"), ("affine_two_fences", "file"),
    ("affine_unterminated", "file"), ("affine_search_replace", "search_replace"),
    ("affine_search_replace_whitespace", "search_replace"),
])
def test_usable_replies_give_a_correct_candidate(name, kind, tmp_path):
    parsed = _reply(name)
    assert parsed.ok and parsed.failure is None and parsed.kind == kind
    assert check_source(parsed.source) == []  # the guard has nothing to say
    assert matches_affine(parsed.source, tmp_path, f"kf_reply_{name}")


def test_prose_around_the_fence_is_dropped():
    parsed = _reply("affine_correct", None)
    assert parsed.source.startswith("import torch\n") and parsed.source.endswith("return out\n")
    assert "memory bandwidth" not in parsed.source and parsed.notes == []


def test_of_several_fences_the_last_complete_one_defining_modelnew_is_taken():
    parsed = _reply("affine_two_fences")
    assert "affine_flat_kernel" in parsed.source and "affine_row_kernel" not in parsed.source
    assert "kfoundry eval" not in parsed.source
    assert parsed.notes == ["3 code blocks: took the last complete one defining ModelNew"]


def test_search_replace_fixes_the_grid_of_the_parent():
    parsed = _reply("affine_search_replace")
    assert parsed.blocks_applied == 1 and parsed.notes == []
    assert "(triton.cdiv(n, BLOCK),)" in parsed.source and "n // BLOCK" not in parsed.source.split('"""')[2]
    unchanged = [line for line in PARENT.splitlines() if "n // BLOCK,)](x" not in line]
    assert all(line in parsed.source.splitlines() for line in unchanged)


def test_whitespace_drifted_search_is_matched_and_reindented():
    parsed = _reply("affine_search_replace_whitespace")
    assert parsed.blocks_applied == 1
    assert parsed.notes == ["block 1 matched the parent only when ignoring whitespace"]
    assert "        grid = (triton.cdiv(n, BLOCK),)\n        _affine_kernel[grid](" in parsed.source


def test_a_block_that_does_not_apply_is_named_with_its_first_line():
    parsed = _reply("affine_search_replace_bad")
    assert not parsed.ok and parsed.source is None and parsed.kind == "search_replace"
    assert parsed.blocks_applied == 1
    assert parsed.failure.startswith("SEARCH/REPLACE block 2 (first line `grid = (n // BLOCK,)`) does not apply")
    assert "(1 of 2 block(s) applied)" in parsed.failure


@pytest.mark.parametrize("name,failure", [
    ("affine_no_code", "the reply has no code block"),
    ("affine_refusal", "the model refused"),
    ("affine_no_modelnew", "the code defines no class ModelNew"),
    ("affine_broken", "the code does not parse: line 21: expected ':': `def forward(self, x)`"),
])
def test_unusable_replies_say_why(name, failure):
    parsed = _reply(name)
    assert not parsed.ok and parsed.source is None
    assert parsed.failure.startswith(failure), parsed.failure


def test_the_cheating_reply_parses_and_the_guard_catches_it():
    parsed = _reply("affine_cheating")
    assert parsed.ok
    assert "torch-compute" in {finding.rule for finding in check_source(parsed.source)}


def test_the_cuda_reply_parses_and_passes_the_static_guard():
    parsed = _reply("affine_cuda")
    assert parsed.ok and "load_inline" in parsed.source
    assert check_source(parsed.source) == []


def test_a_cut_off_reply_says_so():
    text = (REPLIES / "affine_correct.md").read_text()
    cut = text[: text.index("        grid = (triton.cdiv")]
    parsed = parse_reply(cut + "        grid = (triton.cdiv(n_elements,", None)
    assert not parsed.ok and "does not parse" in parsed.failure and "cut off" in parsed.failure
    assert parsed.draft is not None  # kept for the log


def test_code_without_a_fence_is_taken_whole():
    code = (REPLIES / "affine_correct.md").read_text().split("```python\n")[1].split("```")[0]
    parsed = parse_reply("Here it is:\n\n" + code, None)
    assert parsed.ok and parsed.source.startswith("import torch")


def test_edits_need_a_parent():
    parsed = _reply("affine_search_replace", None)
    assert not parsed.ok and "no parent to apply them to" in parsed.failure


def test_an_ambiguous_search_asks_for_more_lines():
    reply = "<<<<<<< SEARCH\n        self.shift = shift\n=======\n        self.shift = float(shift)\n>>>>>>> REPLACE\n"
    parent = PARENT.replace("        self.shift = shift\n", "        self.shift = shift\n        self.shift = shift\n")
    parsed = parse_reply(reply, parent)
    assert "matches 2 places in the parent: include more lines" in parsed.failure


def test_an_unclosed_block_and_an_empty_search():
    parsed = parse_reply("<<<<<<< SEARCH\n        BLOCK = 256\n=======\n        BLOCK = 512\n", PARENT)
    assert "block 1 is not closed" in parsed.failure
    parsed = parse_reply("<<<<<<< SEARCH\n\n=======\nx = 1\n>>>>>>> REPLACE\n", PARENT)
    assert "empty SEARCH part" in parsed.failure


def test_several_blocks_apply_in_order():
    reply = ("```python\n<<<<<<< SEARCH\n        BLOCK = 256\n=======\n        BLOCK = 512\n>>>>>>> REPLACE\n```\n"
             "and\n<<<<<<< SEARCH\n        BLOCK = 512\n        _affine_kernel[(n // BLOCK,)]"
             "(x, y, n, float(self.scale), float(self.shift), BLOCK=BLOCK)  # BUG: floor\n=======\n"
             "        BLOCK = 1024\n        _affine_kernel[(triton.cdiv(n, BLOCK),)]"
             "(x, y, n, float(self.scale), float(self.shift), BLOCK=BLOCK)\n>>>>>>> REPLACE\n")
    parsed = parse_reply(reply, PARENT)
    assert parsed.ok and parsed.blocks_applied == 2 and "BLOCK = 1024" in parsed.source


def test_a_reply_that_repeats_the_parent_is_refused():
    parsed = parse_reply(f"No change needed:\n\n```python\n{PARENT}```\n", PARENT)
    assert parsed.failure == "the reply repeats the parent unchanged"


def test_empty_windows_line_endings_and_non_python_fences():
    assert parse_reply("   \n", None).failure == "the reply is empty"
    text = (REPLIES / "affine_correct.md").read_text().replace("\n", "\r\n")
    parsed = parse_reply(text, None)
    assert parsed.ok and "\r" not in parsed.source
    parsed = parse_reply("```cuda\n__global__ void k() {}\n```\n", None)
    assert "hold no Python file defining class ModelNew" in parsed.failure


def test_a_fence_indented_in_a_list_is_dedented():
    code = (REPLIES / "affine_correct.md").read_text().split("```python\n")[1].split("```")[0]
    indented = "\n".join("    " + line if line else "" for line in code.splitlines())
    parsed = parse_reply(f"1. The file:\n\n    ```python\n{indented}\n    ```\n", None)
    assert parsed.ok and parsed.source.startswith("import torch\n")


@pytest.mark.parametrize("text", [
    "I can’t assist with writing that kernel.", "I cannot help with this request.",
    "I am unable to provide that code.", "I'm not able to help with that.", "Sorry, I won't write this.",
])
def test_refusals_in_their_usual_wordings(text):
    assert parse_reply(text, None).failure.startswith("the model refused")


def test_an_apology_without_code_is_no_code_not_a_refusal():
    parsed = parse_reply("I'm sorry for the confusion earlier. The kernel should use triton.cdiv for its grid.", None)
    assert parsed.failure.startswith("the reply has no code block")
    assert parse_reply("I am able to help: use triton.cdiv.", None).failure.startswith("the reply has no code")
