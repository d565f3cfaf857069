"""kfoundry.library.text_index: BM25 through bm25s, which never reaches JAX. Where JAX is installed, bm25s's
import runs `import jax.lax` and a top_k, and JAX then takes 75% of the GPU's memory in the main process.

A fake `jax` package on the path stands in for JAX: its modules write a mark file when imported and when
top_k is called. Each check runs in a fresh interpreter (bm25s imports once per process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from kfoundry.library.text_index import bm25_scores

FAKE_LAX = """
import os

with open(os.path.join(os.environ["FAKE_JAX_MARKS"], "imported-lax"), "w"):
    pass


def top_k(values, k):
    with open(os.path.join(os.environ["FAKE_JAX_MARKS"], "top_k"), "w"):
        pass
    return values[:k], list(range(k))
"""


@pytest.fixture
def fake_jax(tmp_path) -> dict[str, str]:
    """The environment of a Python whose `import jax` finds the fake; its marks go to tmp_path/marks."""
    package = tmp_path / "site" / "jax"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('import os\nopen(os.path.join(os.environ["FAKE_JAX_MARKS"], "imported"), "w").close()\n')
    (package / "lax.py").write_text(FAKE_LAX)
    (tmp_path / "marks").mkdir()
    path = os.pathsep.join(filter(None, [str(tmp_path / "site"), os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path, FAKE_JAX_MARKS=str(tmp_path / "marks"))


def _run(code: str, env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _marks(env: dict[str, str]) -> list[str]:
    return sorted(os.listdir(env["FAKE_JAX_MARKS"]))


def test_the_fake_is_what_bm25s_would_import(fake_jax):
    """Without our import, bm25s imports JAX and runs its top_k (else the tests below would prove nothing)."""
    _run("import json, bm25s; print(json.dumps(bm25s.selection.JAX_IS_AVAILABLE))", fake_jax)
    assert _marks(fake_jax) == ["imported", "imported-lax", "top_k"]


def test_bm25_scores_never_import_jax(fake_jax):
    result = _run("""
        import json, sys
        from kfoundry.library.text_index import bm25_scores

        scores = bm25_scores(["softmax over rows", "a convolution", "row reduction"], "softmax")
        import bm25s
        print(json.dumps({"scores": scores, "jax": "jax" in sys.modules,
                          "jax_in_bm25s": bm25s.selection.JAX_IS_AVAILABLE}))
    """, fake_jax)
    assert _marks(fake_jax) == [], "bm25s imported the fake jax"
    assert result["jax"] is False and result["jax_in_bm25s"] is False
    assert result["scores"] == [1.0, 0.0, 0.0]


def test_jax_that_the_user_imported_stays_theirs(fake_jax):
    """In an API use the user's code may have imported JAX: bm25s still does not use it, and it stays imported."""
    result = _run("""
        import json, sys
        import jax, jax.lax
        before = (sys.modules["jax"], sys.modules["jax.lax"])
        from kfoundry.library.text_index import bm25_scores

        scores = bm25_scores(["softmax over rows", "a convolution"], "softmax")
        import bm25s
        import jax.lax as again
        print(json.dumps({"same": (sys.modules["jax"], sys.modules["jax.lax"]) == before and again is before[1],
                          "jax_in_bm25s": bm25s.selection.JAX_IS_AVAILABLE, "scores": scores}))
    """, fake_jax)
    assert result["same"] is True and result["jax_in_bm25s"] is False
    assert _marks(fake_jax) == ["imported", "imported-lax"], "bm25s ran the user's JAX"
    assert result["scores"] == [1.0, 0.0]


def test_bm25_scores_rank_and_normalize():
    assert bm25_scores([], "anything") == []
    assert bm25_scores(["a b"], "") == [0.0]
    scores = bm25_scores(["layer norm kernel", "matmul tiles", "layer norm fused"], "layer norm")
    assert max(scores) == 1.0 and scores[1] == 0.0
