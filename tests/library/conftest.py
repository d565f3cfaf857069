import pytest

from kfoundry.library import Library


@pytest.fixture
def lib(tmp_path):
    with Library(tmp_path / "library.sqlite") as library:
        yield library


GEMM_SIG = {"problem": "linear_relu", "kind": "gemm+pointwise", "ops": ["aten.t", "aten.addmm", "aten.relu"],
            "compute_ops": ["aten.addmm", "aten.relu"], "text": "gemm pointwise addmm relu linear",
            "inputs": [{"shape": [64, 32], "dtype": "float32"}], "outputs": [{"shape": [64, 16], "dtype": "float32"}]}
