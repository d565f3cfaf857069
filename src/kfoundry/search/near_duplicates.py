"""Rejecting proposals whose code is nearly that of a candidate already seen, by the cosine similarity of
code embeddings (kfoundry.library.embeddings gives them; `prepare` is what is embedded of a source). The exact-duplicate check (normalized-source hash) catches
identical code; this one catches renamed variables, changed literals and other edits that leave the code
much as it was.

Measured with all-MiniLM-L6-v2 (comments, docstrings, imports and layout are not read): a changed numeric
literal scores ~1.0; renaming a few variables 0.98-0.99, renaming most of them ~0.965; a one-line change of
the function computed (softmax -> log-softmax) ~0.99; the same softmax by another algorithm (one block vs an
online two-pass loop) ~0.90; the library's seed kernels against each other 0.68-0.88. A threshold of about
0.95 rejects renames and literal changes and keeps different algorithms; no threshold tells a rename from a
one-line change of meaning. Long sources are read in windows whose vectors are averaged, so the longer the
source, the less one changed line moves its vector."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np


class NearDuplicateFilter:
    """The loop asks it about every proposal except those of experts whose job is a small edit of their
    parent (a repair, the tuner: Traits.small_edits), whose children are near their parents by design."""

    def __init__(self, threshold: float, embedder: Any, prepare: Callable[[str], str] = lambda source: source):
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"near-duplicate threshold must be in (0, 1], not {threshold}")
        self.threshold = threshold
        self.embedder = embedder  # kfoundry.library.embeddings.Embedder, or anything with embed(texts)
        self.prepare = prepare  # source -> the text embedded (kfoundry.library.embeddings.code_text)
        self._ids: list[str] = []
        self._known: set[str] = set()
        self._rows: list[np.ndarray] = []
        self._matrix: np.ndarray | None = None  # _rows stacked, rebuilt when rows were added
        self._vectors: dict[str, np.ndarray] = {}  # digest of the embedded text -> its vector

    def __len__(self) -> int:
        return len(self._ids)

    def _embed(self, sources: list[str]) -> list[np.ndarray]:
        texts = [self.prepare(s) for s in sources]
        keys = [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts]
        missing = list({k: t for k, t in zip(keys, texts) if k not in self._vectors}.items())
        if missing:
            for (key, _), vector in zip(missing, self.embedder.embed([t for _, t in missing])):
                self._vectors[key] = np.asarray(vector, dtype=np.float32)
        return [self._vectors[k] for k in keys]

    def vector(self, source: str) -> np.ndarray:
        """The unit vector of a source's code (cached: checking and then adding embeds once)."""
        return self._embed([source])[0]

    def is_near(self, source: str) -> tuple[bool, str | None, float]:
        """(near, the id of the most similar source added, its cosine similarity); (False, None, 0.0) when
        nothing was added yet."""
        if not self._ids:
            return False, None, 0.0
        if self._matrix is None or len(self._matrix) != len(self._rows):
            self._matrix = np.stack(self._rows)
        scores = self._matrix @ self.vector(source)
        best = int(np.argmax(scores))
        score = float(scores[best])
        return score >= self.threshold, self._ids[best], score

    def add(self, id: str, source: str) -> None:
        """Remember a source under an id; an id already added is left as it is."""
        if id in self._known:
            return
        self._ids.append(id)
        self._rows.append(self.vector(source))
        self._known.add(id)

    def rebuild(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Start over from (id, source) pairs, e.g. a resumed run's individuals; embedded in one batch."""
        pairs = list(pairs)
        self._ids, self._rows, self._matrix, self._known = [], [], None, set()
        self._embed([source for _, source in pairs])
        for id, source in pairs:
            self.add(id, source)
