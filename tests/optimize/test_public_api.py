"""`kfoundry.optimize` is the function (its real signature for inspect and help()), while the imports that treat it
as a module keep working."""

import inspect
import pydoc
import subprocess
import sys

import kfoundry
from kfoundry.optimize import OptimizeSettings, driver, optimize


def test_the_signature_and_help_are_the_functions():
    assert inspect.isfunction(kfoundry.optimize) and kfoundry.optimize is optimize
    assert inspect.signature(kfoundry.optimize) == inspect.signature(driver.optimize)
    assert list(inspect.signature(kfoundry.optimize).parameters)[:3] == ["problem", "out", "resume"]
    page = pydoc.render_doc(kfoundry.optimize, renderer=pydoc.plaintext)
    assert "function optimize in module kfoundry.optimize" in page
    assert "optimize(problem: " in page and "Run (or, with `resume=RUN_DIR`" in page
    assert "PACKAGE CONTENTS" not in page


def test_the_module_imports_keep_working():
    import kfoundry.optimize
    import kfoundry.optimize as imported

    assert imported is kfoundry.optimize
    assert kfoundry.optimize.OptimizeSettings is OptimizeSettings and kfoundry.optimize.driver is driver
    assert sys.modules["kfoundry.optimize"].optimize is optimize


def test_patching_the_modules_function_reaches_its_importers(monkeypatch):
    import kfoundry.optimize

    calls = []
    monkeypatch.setattr(kfoundry.optimize, "optimize", lambda *a, **k: calls.append(a))
    from kfoundry.optimize import optimize as imported

    imported("problem.py")
    assert calls == [("problem.py",)]
    monkeypatch.undo()
    from kfoundry.optimize import optimize as restored

    assert restored is optimize


def test_every_import_order_binds_the_function():
    for first in ("import kfoundry", "import kfoundry.optimize.driver", "from kfoundry import optimize",
                  "import kfoundry.optimize"):
        code = f"{first}\nimport inspect, kfoundry\nassert inspect.isfunction(kfoundry.optimize), kfoundry.optimize"
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, (first, result.stderr)
