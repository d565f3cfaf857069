"""kfoundry.search.near_duplicates with the real embedding model: renamed variables and changed literals are near,
different kernels are not; the loop drops a near duplicate (event, not evaluated) unless its expert makes small
edits by design; a restored loop rebuilds the filter from its individuals."""

import asyncio
import json

import numpy as np
import pytest

from kfoundry.experts import Router, registry
from kfoundry.library import embeddings
from kfoundry.library.embeddings import code_text
from kfoundry.search import Archipelago, Individual, Outcome, SearchLoop, StopRules
from kfoundry.search.near_duplicates import NearDuplicateFilter
from kfoundry.types import Diagnosis
from tests.search.helpers import experts as toy_experts

THRESHOLD = 0.95

SOFTMAX = '''@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    y = num / tl.sum(num, axis=0)
    tl.store(y_ptr + row * stride + cols, y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        softmax_kernel[(x.shape[0],)](x, y, x.shape[1], x.stride(0), BLOCK=1024)
        return y
'''

RENAMED = SOFTMAX.replace("num", "numerator").replace("row", "r").replace("cols", "offsets")
BLOCK_CHANGED = SOFTMAX.replace("BLOCK=1024", "BLOCK=2048")

# the same function by another algorithm: one pass for the max and the sum, one to write
ONLINE_SOFTMAX = '''@triton.jit
def softmax_online(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf"))
        tl.store(y_ptr + row * stride + cols, tl.exp(x - m) / s, mask=cols < n_cols)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        softmax_online[(x.shape[0],)](x, y, x.shape[1], x.stride(0), BLOCK=256)
        return y
'''

MATMUL = '''@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


class ModelNew(nn.Module):
    def forward(self, a, b):
        c = torch.empty((a.shape[0], b.shape[1]), device=a.device, dtype=torch.float32)
        grid = (a.shape[0] // 64, b.shape[1] // 64)
        matmul_kernel[grid](a, b, c, a.shape[0], b.shape[1], a.shape[1], BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)
        return c
'''


class EachTextOnce:
    """The real embedder, each text embedded once for the module: the model is slow on a small CPU."""

    def __init__(self, embedder):
        self.embedder = embedder
        self.vectors = {}

    def embed(self, texts, whole=True):
        missing = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        if missing:
            self.vectors.update(zip(missing, self.embedder.embed(missing, whole)))
        return np.stack([self.vectors[t] for t in texts])


@pytest.fixture(scope="module")
def embedder():
    if not embeddings.available():
        pytest.skip(f"the optional embedding model is not installed: {embeddings.INSTALL_HINT}")
    embedder = EachTextOnce(embeddings.Embedder())
    embedder.embed([code_text(s) for s in (SOFTMAX, RENAMED, BLOCK_CHANGED, ONLINE_SOFTMAX, MATMUL)])  # one batch
    return embedder


def test_renames_and_literals_are_near_other_kernels_are_not(embedder):
    nd = NearDuplicateFilter(THRESHOLD, embedder, prepare=code_text)
    assert nd.is_near(SOFTMAX) == (False, None, 0.0)  # nothing added yet
    nd.add("softmax", SOFTMAX)
    nd.add("matmul", MATMUL)
    for source in (RENAMED, BLOCK_CHANGED, "# a comment\n" + SOFTMAX):
        near, similar_to, score = nd.is_near(source)
        assert near and similar_to == "softmax" and score >= THRESHOLD
    near, similar_to, score = nd.is_near(ONLINE_SOFTMAX)
    assert not near and similar_to == "softmax" and 0.5 < score < THRESHOLD
    assert nd.is_near(MATMUL) == (True, "matmul", pytest.approx(1.0))
    nd.add("softmax", MATMUL)  # an id already there keeps its source
    assert len(nd) == 2 and nd.is_near(RENAMED)[1] == "softmax"
    nd.rebuild([("online", ONLINE_SOFTMAX)])
    assert len(nd) == 1 and nd.is_near(SOFTMAX)[1] == "online"
    # the loop asks it about every expert's proposals except those of small edits by design
    traits = {e.name: e.traits for e in registry.build(registry.Setup(llm=object()))}
    assert not traits["memory"].small_edits and traits["tuner"].small_edits and traits["repair"].small_edits
    with pytest.raises(ValueError):
        NearDuplicateFilter(1.5, embedder, prepare=code_text)


class Script:
    """Proposes the given sources in order, whatever the parent and the expert."""

    def __init__(self, *sources):
        self.sources = list(sources)

    async def __call__(self, parent, others, expert):
        return self.sources.pop(0) if self.sources else None


class AllCorrect:
    async def submit(self, individual):
        return Outcome("ok", 1.0, Diagnosis(status="ok", summary="", focus="memory", bound="memory"))


def _loop(experts, proposer, nd, events, generations=3):
    arch = Archipelago(k=1, migrate_every=10, capacity=6, elites=2)
    return SearchLoop(arch, AllCorrect(), Router(toy_experts(proposer, experts), seed=0),
                      StopRules(max_generations=generations),
                      seed=0, on_event=events.append, near_duplicates=nd, concurrency=1)


def test_the_loop_drops_a_near_duplicate_without_evaluating_it(embedder):
    events = []
    loop = _loop(["initializer", "memory"], Script(SOFTMAX, RENAMED, MATMUL), NearDuplicateFilter(THRESHOLD, embedder, prepare=code_text),
                 events)
    asyncio.run(loop.run())
    sources = [ind.source for ind in loop.individuals.values()]
    assert sources == [SOFTMAX, MATMUL]
    first = next(iter(loop.individuals))
    [event] = [e for e in events if e["event"] == "near_duplicate"]
    assert event["expert"] == "memory" and event["similar_to"] == first and event["score"] >= THRESHOLD
    assert not any(e["event"] == "proposed" and e["id"] == event["id"] for e in events)
    assert len(loop.near_duplicates) == 2

    # a restored loop rebuilds its filter from the individuals the run store kept
    stored = {i.id: Individual.from_dict(json.loads(json.dumps(i.to_dict()))) for i in loop.individuals.values()}
    resumed = _loop(["initializer", "memory"], Script(), NearDuplicateFilter(THRESHOLD, embedder, prepare=code_text), [])
    resumed.restore(json.loads(json.dumps(loop.state())), stored)
    assert len(resumed.near_duplicates) == 2 and resumed.near_duplicates.is_near(RENAMED)[1] == first


def test_the_tuners_small_edits_are_not_checked(embedder):
    events = []
    loop = _loop(["initializer", "tuner"], Script(SOFTMAX, BLOCK_CHANGED), NearDuplicateFilter(THRESHOLD, embedder, prepare=code_text),
                 events, generations=2)
    asyncio.run(loop.run())
    assert [ind.expert for ind in loop.individuals.values()] == ["initializer", "tuner"]
    assert not any(e["event"] == "near_duplicate" for e in events)
