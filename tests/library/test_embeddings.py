"""kfoundry.library.embeddings: what of code is read (not comments, docstrings, imports), unit vectors from the bundled model (loaded once per
process), long sources read whole, and a clear error naming the extra when the model is not installed."""

import numpy as np
import pytest

from kfoundry.errors import UsageError
from kfoundry.library import embeddings
from kfoundry.library.embeddings import Embedder, code_text

needs_model = pytest.mark.skipif(not embeddings.available(),
                                 reason=f"the optional embedding model is not installed: {embeddings.INSTALL_HINT}")

SOURCE = '''"""Module docstring: about softmax."""
import triton  # the compiler


def kernel(x):
    """Docstring of the kernel."""
    # a whole-line comment
    y = x + 1   # trailing comment
    return "# not a comment"
'''


@pytest.fixture(scope="module")
def embedder():
    if not embeddings.available():
        pytest.skip(f"the optional embedding model is not installed: {embeddings.INSTALL_HINT}")
    return Embedder().load()  # once for the module (and the model once for the process)


def test_code_text_drops_comments_docstrings_and_layout():
    assert code_text(SOURCE) == 'def kernel(x): y = x + 1 return "# not a comment"'
    assert code_text("import torch\r\ndef f():\r\n    import math\r\n") == "def f(): import math"
    assert code_text("def broken(:\n    # c\n    pass\n") == "def broken(: pass"  # does not parse: comments go


def test_missing_model_is_a_usage_error_naming_the_extra(monkeypatch):
    monkeypatch.setattr(embeddings, "available", lambda: False)
    with pytest.raises(UsageError, match=r"pip install 'kfoundry\[embeddings\]'"):
        Embedder()


@needs_model
def test_unit_vectors_and_meaning(embedder):
    vectors = embedder.embed(["softmax over the rows", "row-wise softmax", "a 3x3 convolution filter"])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embedder.similarity(vectors[0], vectors[1]) > embedder.similarity(vectors[0], vectors[2]) + 0.2
    assert embedder.similarity("softmax over the rows", "softmax over the rows") == pytest.approx(1.0, abs=1e-5)
    assert Embedder().model is embedder.model  # one model per process


@needs_model
def test_long_sources_are_read_whole(embedder):
    body = "".join(f"    acc_{i} = tl.load(ptr + {i} * stride, mask=mask, other=0.0)\n" for i in range(20))  # ~550 tokens
    head = "@triton.jit\ndef kernel(ptr, out, stride, mask):\n" + body
    a, b = head + "    tl.store(out, acc_0)\n", head + "    tl.store(out, tl.exp(acc_0) / tl.sum(acc_1))\n"
    whole = embedder.embed_code([a, b])
    first_window = embedder.embed([code_text(a), code_text(b)], whole=False)
    assert embedder.similarity(first_window[0], first_window[1]) == pytest.approx(1.0, abs=1e-6)  # the end unread
    assert embedder.similarity(whole[0], whole[1]) < 0.9999


@needs_model
def test_the_packaged_weights_are_upstreams():
    """The [embeddings] extra is a third party's repackaging (docs/search.md says why it is used): its weights must be
    sentence-transformers/all-MiniLM-L6-v2's at revision 1110a243, byte for byte."""
    import hashlib
    from importlib import import_module

    folder = import_module(embeddings.MODEL_PACKAGE).get_model_path()
    digest = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    assert digest == "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
