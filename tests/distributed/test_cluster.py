"""--cluster strings, and the error without Ray (these tests need no Ray)."""

import sys

import pytest

from kfoundry.distributed import cluster_address, connect, require_ray
from kfoundry.errors import UsageError


@pytest.mark.parametrize("spec, address", [("ray", None), ("ray://head:10001", "ray://head:10001"),
                                           (" ray://10.0.0.5:10001 ", "ray://10.0.0.5:10001")])
def test_cluster_addresses(spec, address):
    assert cluster_address(spec) == address


@pytest.mark.parametrize("spec", ["ray://head", "ray://:10001", "dask", "http://head:10001", "ray://h:p"])
def test_bad_cluster_specs_say_what_works(spec):
    with pytest.raises(UsageError, match=r"ray://HOST:PORT"):
        cluster_address(spec)


def test_without_ray_the_error_says_how_to_install_it(monkeypatch, problems_dir):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as if it were not installed
    with pytest.raises(UsageError, match=r"pip install 'kfoundry\[ray\]'"):
        require_ray()
    with pytest.raises(UsageError, match=r"pip install 'kfoundry\[ray\]'"):
        connect("ray")
    from kfoundry.distributed import RayEvaluator

    with pytest.raises(UsageError, match=r"pip install 'kfoundry\[ray\]'"):
        RayEvaluator(problems_dir / "affine.py")
