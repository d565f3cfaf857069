"""kfoundry.experts.base: the parents an expert starts from follow its traits; the module stands alone."""

import subprocess
import sys

from kfoundry.experts.base import Step, Traits, parents_of


def test_the_parents_follow_the_traits():
    step = Step(parent="p", others=["a", "b"])
    assert parents_of(Traits(), step) == ["p"]
    assert parents_of(Traits(min_parents=2), step) == ["p", "a", "b"]
    assert parents_of(Traits(min_parents=0), step) == [] and parents_of(Traits(), Step()) == []


def test_the_search_imports_nothing_of_diagnose_runs_or_library():
    code = ("import sys, kfoundry.search, kfoundry.search.near_duplicates; "
            "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('kfoundry.')}))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    for package in ("diagnose", "runs", "library", "optimize", "evaluate"):
        assert f"'{package}'" not in loaded, loaded
