"""Prompt budgets in tokens: counting them, and cutting retrieved library items to a budget, best first.

Tokens are counted with a real tokenizer where one works offline here: tiktoken when its encoding file is
already in the cache it reads (tiktoken fetches the file from the network at first use, and must never be led
to), else bpe_openai (its encodings are built in), else an estimate fitted to o200k_base counts.
`tokenizer().name` says which one counts.

A prompt's experience list holds library items (dicts with `title`, `text`, optionally `source`, `code`,
`score`, `why`) and may hold notes: dicts with `type` "note" that say something about the retrieval itself
(nothing close enough, items left out for the budget). Notes carry `id`, `title` and `score` like items, so a
run's event log records them beside the items."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_RETRIEVE_TOKENS = 3000  # the prompt's "Retrieved experience" section: about two seed kernels with code
ENCODINGS = ("o200k_base", "cl100k_base")  # the first one available offline counts
CLIP_MARK = " ... (clipped)"
MIN_CLIPPED_TOKENS = 60  # a clipped text shorter than this says too little to be worth its heading


# --- counting -----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Tokenizer:
    name: str  # "tiktoken o200k_base", "bpe_openai o200k_base" or "estimate"
    count: Callable[[str], int]

    @property
    def exact(self) -> bool:
        return self.name != "estimate"


_WORD = re.compile(r"[A-Za-z]+")
_DIGITS = re.compile(r"\d{1,3}")
_SYMBOL = re.compile(r"[^\sA-Za-z\d]")


def estimate_tokens(text: str) -> int:
    """About what o200k_base (or cl100k_base) counts: a token per word, one more per 25 letters of words,
    one per group of up to three digits (how those encodings split numbers), half a token per ASCII symbol
    and per newline, one per other character. Fitted by least squares on ~1000 chunks of this repository
    (code, templates, docs) and rounded: the median ratio to o200k_base is 0.99, 90% of chunks fall
    within 0.90..1.08. chars/4, the usual rule, counts Triton code 20-40% short (code runs ~3.2 chars a
    token, prose ~4.5)."""
    if not text:
        return 0
    words = _WORD.findall(text)
    symbols = _SYMBOL.findall(text)
    ascii_symbols = sum(1 for s in symbols if s.isascii())
    total = (len(words) + sum(map(len, words)) / 25 + len(_DIGITS.findall(text))
             + ascii_symbols / 2 + (len(symbols) - ascii_symbols) + text.count("\n") / 2)
    return max(1, round(total))


def tiktoken_cache_dir() -> Path | None:
    """Where the installed tiktoken keeps the encoding files it downloaded; None when caching is off
    (TIKTOKEN_CACHE_DIR=""), where every use downloads."""
    for variable in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if variable in os.environ:
            return Path(os.environ[variable]) if os.environ[variable] else None
    try:
        from tiktoken import load
    except ImportError:
        return None
    default = getattr(load, "_default_cache_dir", None)  # newer releases: the user's cache folder
    if default is not None:
        return Path(default())
    return Path(tempfile.gettempdir()) / "data-gym-cache"  # older ones: a folder in the temp dir


_BLOB = r'load_tiktoken_bpe\(\s*"([^"]*/{name}\.tiktoken)"\s*(?:,\s*expected_hash\s*=\s*"([0-9a-f]{{64}})")?'


def tiktoken_cached_file(name: str) -> Path | None:
    """The cached file tiktoken would read for encoding `name`, when it is there and sound (a file that fails
    tiktoken's hash check is fetched again): its name is the sha1 of the file's address, which differs between
    tiktoken releases, so it is read from the installed tiktoken_ext/openai_public.py."""
    try:
        spec = importlib.util.find_spec("tiktoken_ext.openai_public")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    match = re.search(_BLOB.format(name=re.escape(name)), Path(spec.origin).read_text(encoding="utf-8"))
    folder = tiktoken_cache_dir()
    if match is None or folder is None:
        return None
    path = folder / hashlib.sha1(match.group(1).encode()).hexdigest()
    if not path.is_file():
        return None
    if match.group(2) and hashlib.sha256(path.read_bytes()).hexdigest() != match.group(2):
        return None
    return path


def _tiktoken() -> Tokenizer | None:
    if importlib.util.find_spec("tiktoken") is None:
        return None
    import tiktoken

    for name in ENCODINGS:
        if tiktoken_cached_file(name) is None:
            continue
        try:
            encoding = tiktoken.get_encoding(name)
        except Exception:  # noqa: BLE001 -- a broken install or cache: count another way
            continue
        return Tokenizer(f"tiktoken {name}", lambda text, e=encoding: len(e.encode(text, disallowed_special=())))
    return None


def _bpe_openai() -> Tokenizer | None:
    if importlib.util.find_spec("bpe_openai") is None:
        return None
    try:
        import bpe_openai

        encoding = bpe_openai.get_encoding(ENCODINGS[0])
    except Exception:  # noqa: BLE001 -- a broken install: count another way
        return None
    return Tokenizer(f"bpe_openai {ENCODINGS[0]}", lambda text: len(encoding.encode(text, disallowed_special=())))


@functools.lru_cache(maxsize=1)
def tokenizer() -> Tokenizer:
    """The first of tiktoken (its encoding already cached), bpe_openai, and the estimate."""
    return _tiktoken() or _bpe_openai() or Tokenizer("estimate", estimate_tokens)


def count_tokens(text: str) -> int:
    """Tokens in `text`, by tokenizer() (whose `name` says how they were counted)."""
    return tokenizer().count(text) if text else 0


# --- cutting items to a budget ------------------------------------------------------------------------------------

def note(text: str, score: float | None = None, **facts: Any) -> dict[str, Any]:
    """A statement about the retrieval for the prompt (and the run's events), not a library item."""
    return {"type": "note", "id": None, "title": text, "text": text, "score": score, **facts}


def is_note(item: dict[str, Any]) -> bool:
    return item.get("type") == "note"


def heading(item: dict[str, Any]) -> str:
    """An item's heading in the prompt: its title, where it is from, its score and why it was retrieved."""
    title, source = str(item.get("title") or "untitled"), str(item.get("source") or "")
    text = title + (f" (from {source})" if source else "")
    if item.get("score") is not None:
        text += f" — score {float(item['score']):.2f}"
        if item.get("why"):
            text += f"; {item['why']}"
    elif item.get("why"):
        text += f" — {item['why']}"
    return text


def _document(item: dict[str, Any], code: bool) -> str:
    """The item as the prompt shows it, near enough to count its tokens."""
    parts = [f"### 9. {heading(item)}", str(item.get("text") or "").strip()]
    if code and item.get("code"):
        parts.append(f"```python\n{item['code']}\n```")
    return "\n\n".join(parts) + "\n\n"


def clip_to_tokens(text: str, limit: int, count: Callable[[str], int] = count_tokens) -> str:
    """`text` cut (at a word boundary where one is near) so that it and CLIP_MARK fit in `limit` tokens;
    `text` itself when it fits."""
    if count(text) <= limit:
        return text
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if count(text[:middle] + CLIP_MARK) <= limit:
            low = middle
        else:
            high = middle - 1
    cut = text[:low]
    space = cut.rfind(" ")
    if space > 0.8 * len(cut):
        cut = cut[:space]
    return cut.rstrip() + CLIP_MARK


def fit_items(items: list[dict[str, Any]], budget: int = DEFAULT_RETRIEVE_TOKENS,
              count: Callable[[str], int] = count_tokens) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(kept, left out): the items, best first, cut to `budget` tokens. Each item is kept whole while it fits;
    else without its code (`code_left_out` says how many tokens the code had) when that fits; else left out,
    and later, smaller items may still fit. The best item alone is clipped ("(clipped)") rather than left
    out when even its text is over the budget. Kept items are copies carrying `tokens`."""
    kept: list[dict[str, Any]] = []
    left_out: list[dict[str, Any]] = []
    remaining = budget
    for item in items:
        whole = count(_document(item, code=True))
        if whole <= remaining:
            kept.append({**item, "tokens": whole})
            remaining -= whole
            continue
        if item.get("code"):
            bare = {**item, "code_left_out": count(str(item["code"]))}
            bare.pop("code")
            tokens = count(_document(bare, code=False))
            if tokens <= remaining:
                kept.append({**bare, "tokens": tokens})
                remaining -= tokens
                continue
        else:
            bare = dict(item)
        if not kept:
            room = remaining - count(_document({**bare, "text": ""}, code=False))
            if room >= MIN_CLIPPED_TOKENS:
                clipped = {**bare, "text": clip_to_tokens(str(bare.get("text") or ""), room, count),
                           "clipped": True}
                tokens = count(_document(clipped, code=False))
                kept.append({**clipped, "tokens": tokens})
                remaining -= tokens
                continue
        left_out.append(item)
    return kept, left_out


def left_out_note(left_out: list[dict[str, Any]], budget: int, tokenizer_name: str) -> dict[str, Any]:
    counted = "estimated" if tokenizer_name == "estimate" else f"counted with {tokenizer_name}"
    names = "; ".join(f"{item.get('title') or 'untitled'}" + (f" (score {float(item['score']):.2f})"
                                                               if item.get("score") is not None else "")
                      for item in left_out)
    noun = "item was" if len(left_out) == 1 else "items were"
    return note(f"{len(left_out)} more retrieved {noun} left out to keep this section within {budget} tokens "
                f"({counted}): {names}.", left_out=[item.get("id") for item in left_out])
