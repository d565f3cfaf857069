"""BM25 over the library's items, through the bm25s library."""

from __future__ import annotations

import sys
import threading
from types import ModuleType

from kfoundry.problem_signature import tokens

STOPWORDS = frozenset("the a an of on in to and or for is are be by with as at it its this that from not "
                      "into when than then".split())
# bm25s.selection runs `import jax.lax` and a top_k at import where JAX is installed: that starts JAX's GPU
# backend, which takes 75% of the GPU's memory in this process (the main process, which never touches the GPU)
_JAX = ("jax", "jax.lax")
_importing = threading.Lock()  # two threads would each save the other's None as JAX


def words(text: str) -> list[str]:
    return [t for t in tokens(text) if t not in STOPWORDS]


def import_bm25s() -> ModuleType:
    """bm25s, imported with JAX hidden from it (its numpy top-k instead). Where JAX is already imported (the
    user's own code, in an API use) it is hidden only while bm25s imports, and then given back as it was."""
    with _importing:
        if "bm25s" in sys.modules:
            return sys.modules["bm25s"]
        saved = {name: sys.modules[name] for name in _JAX if name in sys.modules}
        for name in _JAX:
            sys.modules[name] = None  # `import jax.lax` raises ImportError, which bm25s expects
        try:
            import bm25s
        finally:
            for name in _JAX:
                if name in saved:
                    sys.modules[name] = saved[name]
                else:
                    sys.modules.pop(name, None)
        return bm25s


def bm25_scores(documents: list[str], query: str) -> list[float]:
    """BM25 score of each document for the query, normalized so the best is 1 (all 0 when nothing matches)."""
    query_words = words(query)
    if not documents or not query_words:
        return [0.0] * len(documents)
    retriever = import_bm25s().BM25(backend="numpy")
    # bm25s wants at least one token per document; an empty one matches nothing
    retriever.index([words(d) or ["\x00"] for d in documents], show_progress=False)
    scores = [float(s) for s in retriever.get_scores(query_words)]
    top = max(scores)
    return [s / top for s in scores] if top > 0 else [0.0] * len(documents)
