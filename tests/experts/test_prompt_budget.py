"""kfoundry.experts.prompt_budget: counting tokens offline (tiktoken only from its cache, never a download) and
cutting retrieved items to a budget, best first."""

import hashlib
import sys
import textwrap

import pytest

from kfoundry.experts import prompt_budget
from kfoundry.experts.prompt_budget import (CLIP_MARK, clip_to_tokens, estimate_tokens, fit_items, heading,
                                            left_out_note)

# o200k_base counts of these two texts (cl100k_base: 77 and 198), taken with a tokenizer offline
PROSE = ("Convolutions become fast Triton kernels as implicit GEMMs: rows are output pixels, columns are output "
         "channels, and the reduction runs over input channels times the kernel window. Fuse the epilogue "
         "(bias, activation, scaling) into the accumulator before the single store, and never materialize an "
         "im2col buffer in global memory; it costs more bandwidth than the convolution itself.")
PROSE_TOKENS = 77
CODE = '''@triton.jit
def _row_softmax(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * stride + offs, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    y = e / tl.sum(e, axis=0)
    tl.store(y_ptr + row * stride + offs, y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n_rows, n_cols = x.shape
        _row_softmax[(n_rows,)](x, y, n_cols, x.stride(0), BLOCK=triton.next_power_of_2(n_cols))
        return y
'''
CODE_TOKENS = 201


def words(text: str) -> int:
    return len(text.split())


def test_the_estimate_is_near_o200k_on_prose_and_on_code():
    assert abs(estimate_tokens(PROSE) - PROSE_TOKENS) <= 0.1 * PROSE_TOKENS
    assert abs(estimate_tokens(CODE) - CODE_TOKENS) <= 0.1 * CODE_TOKENS
    # where chars/4 is 25% over on the prose and 24% short on the code
    assert len(PROSE) / 4 > 1.2 * PROSE_TOKENS and len(CODE) / 4 < 0.8 * CODE_TOKENS
    assert estimate_tokens("") == 0 and estimate_tokens("hello world") == 2


def test_count_tokens_says_which_tokenizer_counted():
    counter = prompt_budget.tokenizer()
    assert counter.name == "estimate" or counter.name.split()[0] in ("tiktoken", "bpe_openai")
    assert counter.exact == (counter.name != "estimate")
    assert prompt_budget.count_tokens(PROSE) == counter.count(PROSE) and prompt_budget.count_tokens("") == 0


# --- tiktoken: its encoding from the cache it reads, or not at all ------------------------------------------------

URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"


@pytest.fixture
def fake_tiktoken(tmp_path, monkeypatch):
    """A tiktoken whose get_encoding fails the test if it is asked for an encoding that is not cached (the real
    one would download it), laid out as the real one is: tiktoken_ext/openai_public.py names each file."""
    blob = b"aGVsbG8= 0\n"
    packages = tmp_path / "site"
    (packages / "tiktoken").mkdir(parents=True)
    (packages / "tiktoken_ext").mkdir()
    (packages / "tiktoken" / "__init__.py").write_text(textwrap.dedent('''
        import os

        from tiktoken.load import read_file_cached

        class Encoding:
            def encode(self, text, disallowed_special="all"):
                assert disallowed_special == ()
                return text.split()

        def get_encoding(name):
            if read_file_cached(name) is None:
                raise AssertionError("would download " + name)
            return Encoding()
        '''))
    (packages / "tiktoken" / "load.py").write_text(textwrap.dedent('''
        import hashlib
        import os

        URLS = {"o200k_base": "%s", "cl100k_base": "https://example.invalid/cl100k_base.tiktoken"}

        def _default_cache_dir():
            return os.path.join(os.path.expanduser("~"), ".cache", "tiktoken")

        def read_file_cached(name):
            path = os.path.join(os.environ["TIKTOKEN_CACHE_DIR"], hashlib.sha1(URLS[name].encode()).hexdigest())
            return open(path, "rb").read() if os.path.exists(path) else None
        ''' % URL))
    (packages / "tiktoken_ext" / "openai_public.py").write_text(textwrap.dedent(f'''
        def o200k_base():
            mergeable_ranks = load_tiktoken_bpe(
                "{URL}",
                expected_hash="{hashlib.sha256(blob).hexdigest()}",
            )

        def cl100k_base():
            mergeable_ranks = load_tiktoken_bpe("https://example.invalid/cl100k_base.tiktoken")
        '''))
    monkeypatch.syspath_prepend(str(packages))
    for name in [m for m in sys.modules if m.split(".")[0] in ("tiktoken", "tiktoken_ext")]:
        monkeypatch.delitem(sys.modules, name)
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    monkeypatch.setattr(prompt_budget, "_bpe_openai", lambda: None)
    prompt_budget.tokenizer.cache_clear()
    yield cache, blob
    prompt_budget.tokenizer.cache_clear()


def test_tiktoken_counts_only_when_its_encoding_is_already_cached(fake_tiktoken, monkeypatch):
    cache, blob = fake_tiktoken
    assert prompt_budget.tokenizer().name == "estimate"  # nothing cached: no download is tried
    path = cache / hashlib.sha1(URL.encode()).hexdigest()
    path.write_bytes(b"damaged")  # tiktoken would fetch a file failing its hash again
    prompt_budget.tokenizer.cache_clear()
    assert prompt_budget.tokenizer().name == "estimate"
    path.write_bytes(blob)
    prompt_budget.tokenizer.cache_clear()
    assert prompt_budget.tiktoken_cached_file("o200k_base") == path
    assert prompt_budget.tokenizer().name == "tiktoken o200k_base"
    assert prompt_budget.count_tokens("one two three") == 3  # the fake encoding's count, not the estimate
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")  # caching off: every use would download
    assert prompt_budget.tiktoken_cache_dir() is None and prompt_budget.tiktoken_cached_file("o200k_base") is None


def test_the_cache_folder_is_the_one_the_installed_tiktoken_reads(fake_tiktoken, monkeypatch, tmp_path):
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR")
    monkeypatch.setenv("DATA_GYM_CACHE_DIR", str(tmp_path / "gym"))
    assert prompt_budget.tiktoken_cache_dir() == tmp_path / "gym"
    monkeypatch.delenv("DATA_GYM_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert prompt_budget.tiktoken_cache_dir() == tmp_path / "home" / ".cache" / "tiktoken"


# --- cutting items to a budget -------------------------------------------------------------------------------------

def item(n: int, text_words: int, code_words: int = 0, score: float = 1.0) -> dict:
    out = {"id": n, "title": f"item{n}", "text": " ".join(["w"] * text_words), "score": score, "why": "test"}
    if code_words:
        out["code"] = " ".join(["c"] * code_words)
    return out


def test_items_are_kept_whole_best_first_while_they_fit():
    items = [item(1, 30), item(2, 30), item(3, 30)]
    kept, left_out = fit_items(items, budget=90, count=words)
    assert [i["id"] for i in kept] == [1, 2] and [i["id"] for i in left_out] == [3]
    assert all(i["tokens"] <= 45 for i in kept) and sum(i["tokens"] for i in kept) <= 90
    assert kept[0]["text"] == items[0]["text"] and "clipped" not in kept[0]


def test_an_items_code_goes_before_the_item():
    items = [item(1, 20, code_words=100), item(2, 20)]
    kept, left_out = fit_items(items, budget=60, count=words)
    assert [i["id"] for i in kept] == [1, 2] and not left_out
    assert "code" not in kept[0] and kept[0]["code_left_out"] == 100
    assert "code" in items[0]  # the caller's items are left as they were


def test_a_smaller_later_item_still_fits_after_a_big_one_is_left_out():
    kept, left_out = fit_items([item(1, 20), item(2, 500), item(3, 20)], budget=60, count=words)
    assert [i["id"] for i in kept] == [1, 3] and [i["id"] for i in left_out] == [2]


def test_only_the_best_item_is_clipped_and_says_so():
    kept, left_out = fit_items([item(1, 500), item(2, 500)], budget=200, count=words)
    assert [i["id"] for i in kept] == [1] and [i["id"] for i in left_out] == [2]
    assert kept[0]["clipped"] and kept[0]["text"].endswith(CLIP_MARK) and kept[0]["tokens"] <= 200
    kept, left_out = fit_items([item(1, 500)], budget=10, count=words)  # too little room: left out, not a stub
    assert kept == [] and len(left_out) == 1


def test_clip_to_tokens_cuts_at_a_word_and_marks_the_cut():
    text = "alpha beta gamma delta epsilon zeta eta theta"
    assert clip_to_tokens(text, 100, words) == text
    clipped = clip_to_tokens(text, 5, words)
    assert clipped == "alpha beta gamma" + CLIP_MARK and words(clipped) <= 5


def test_heading_and_left_out_note():
    assert heading({"title": "T", "source": "library #3", "score": 0.723, "why": "same class (scan)"}) == \
        "T (from library #3) — score 0.72; same class (scan)"
    assert heading({"title": "T"}) == "T"
    note = left_out_note([item(4, 1, score=0.5)], 3000, "estimate")
    assert note["type"] == "note" and note["id"] is None and note["left_out"] == [4]
    assert note["text"] == "1 more retrieved item was left out to keep this section within 3000 tokens " \
                           "(estimated): item4 (score 0.50)."
