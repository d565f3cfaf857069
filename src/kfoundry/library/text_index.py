"""BM25 over the library's items, through the bm25s library."""

from __future__ import annotations

from kfoundry.problem_signature import tokens

STOPWORDS = frozenset("the a an of on in to and or for is are be by with as at it its this that from not "
                      "into when than then".split())


def words(text: str) -> list[str]:
    return [t for t in tokens(text) if t not in STOPWORDS]


def bm25_scores(documents: list[str], query: str) -> list[float]:
    """BM25 score of each document for the query, normalized so the best is 1 (all 0 when nothing matches)."""
    query_words = words(query)
    if not documents or not query_words:
        return [0.0] * len(documents)
    import bm25s

    retriever = bm25s.BM25()
    # bm25s wants at least one token per document; an empty one matches nothing
    retriever.index([words(d) or ["\x00"] for d in documents], show_progress=False)
    scores = [float(s) for s in retriever.get_scores(query_words)]
    top = max(scores)
    return [s / top for s in scores] if top > 0 else [0.0] * len(documents)
