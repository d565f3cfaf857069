"""Shared test set-up: Triton's CPU interpreter, a private cache directory, the `gpu` marker, and
the evaluators several test files share (each evaluation costs worker processes: share them).

Tests other than `gpu` ones pin device="cpu", so the suite means the same on a GPU machine."""

import os
import shutil
import tempfile

# One OpenBLAS thread, here and in every worker (the evaluation environment passes it on), before torch loads
# NumPy: the interpreter's tl.dot is NumPy's matmul, whose extra threads only spin on these tiny products while
# both cores are busy with the suite's two workers (a network candidate's evaluation: 2.8 CPU-s, 1.6 with one)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402 -- torch does not import triton


def _cuda_available() -> bool:
    return torch.cuda.is_available()


# Before anything imports triton (the parent imports it to record its version, and the secret test
# loads a candidate here). Not on a GPU machine: workers inherit it, and `gpu` tests must compile.
if not _cuda_available():
    os.environ["TRITON_INTERPRET"] = "1"
_CACHE_DIR = tempfile.mkdtemp(prefix="kf-test-cache-")
os.environ["KFOUNDRY_CACHE_DIR"] = _CACHE_DIR
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_CACHE_DIR, "inductor"))
# retrieval as without the optional embedding model, installed or not (its tests ask for it by name)
os.environ["KFOUNDRY_SEMANTIC_RETRIEVAL"] = "0"
# optimize and bench judge their final best again at other sizes: one evaluation more per run, which the
# check's own tests ask for by name (check_sizes=True)
os.environ["KFOUNDRY_CHECK_SIZES"] = "0"

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from tests.helpers import AFFINE_SEED  # noqa: E402

TESTS_DIR = Path(__file__).resolve().parent
REPO_DIR = TESTS_DIR.parent


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items or _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in gpu_items:
        item.add_marker(skip)


# The scopes (files, or an xdist group) that take longest in the suite, longest first (seconds summed over their
# tests on the 2-core CPU machine, -n 2): handed out before every other, so that the many short files fill the end
# and neither worker waits at the end for the other's last long file (xdist's own order, most tests first, left
# these few-test files last). A scope missing here only goes back to that order; a stale entry costs nothing.
SLOW_SCOPES = (
    "tests/optimize/test_resume.py",  # ~65 s: `kfoundry optimize` killed and resumed, five times
    "ray",  # ~60 s: tests/distributed/test_ray_evaluator.py and test_driver's local Ray instance
    "tests/evaluate/parent/test_evaluator.py",
    "tests/test_cli.py",
    "tests/optimize/test_driver.py",
    "tests/experts/composer/templates/test_gemm.py",
    "tests/experts/composer/plan/test_conv_statistics.py",
    "tests/evaluate/parent/test_forkserver.py",
    "tests/experts/composer/test_network_ops.py",
    "tests/evaluate/parent/test_memory_plan.py",
    "tests/experts/composer/plan/test_window_store.py",
    "tests/experts/composer/templates/test_reduction.py",
    "tests/experts/composer/test_golden.py",
    "tests/experts/composer/templates/test_conv.py",
    "tests/test_dynamo_stand_in.py",
    "tests/doctor/test_doctor.py",
    "tests/sandbox/test_corpus.py",
    "tests/guard/test_golden.py",
    "tests/experts/composer/test_readable.py",
    "tests/experts/composer/templates/test_pool.py",
)


def pytest_xdist_make_scheduler(config, log):
    """Under `-n N --dist loadgroup` (scripts/test.sh): each test file runs whole in one worker, so its module
    fixtures (evaluators, composed candidates) are built once; tests marked `xdist_group(NAME)` run in one
    worker together whatever their file (the Ray tests: one local Ray instance at a time). SLOW_SCOPES first."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    rank = {scope: index for index, scope in enumerate(SLOW_SCOPES)}

    class FileOrGroup(LoadGroupScheduling):
        _ordered = False

        def _split_scope(self, nodeid: str) -> str:
            # xdist appends "@NAME" to a grouped test's id, after its parameters; an "@" inside the parameters
            # (a URL's user@host) is no group
            last = nodeid.rsplit("::", 1)[-1]
            if "@" in last and not last.endswith("]"):
                return nodeid.rsplit("@", 1)[-1]
            return nodeid.split("::", 1)[0]

        def _assign_work_unit(self, node) -> None:
            if not self._ordered:  # the first assignment: the queue is whole (xdist's order, most tests first)
                self._ordered = True
                queue = sorted(self.workqueue.items(), key=lambda item: rank.get(item[0], len(rank)))  # stable
                self.workqueue.clear()
                self.workqueue.update(queue)
            super()._assign_work_unit(node)

    return FileOrGroup(config, log)


def pytest_unconfigure(config):
    shutil.rmtree(_CACHE_DIR, ignore_errors=True)


@pytest.fixture(scope="session")
def examples_dir() -> Path:
    return REPO_DIR / "examples"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return TESTS_DIR / "fixtures"


@pytest.fixture(scope="session")
def problems_dir(fixtures_dir) -> Path:
    return fixtures_dir / "problems"


@pytest.fixture(scope="session")
def candidates_dir(fixtures_dir) -> Path:
    return fixtures_dir / "candidates"


@pytest.fixture(scope="session")
def affine_evaluator(problems_dir):
    """One Evaluator for problems/affine.py (reference prepared once) shared by the whole session."""
    from kfoundry.evaluate import EvalOptions, Evaluator

    # guard off: these fixtures exercise the evaluator's own verdicts, and many of them compute with
    # PyTorch or read the environment on purpose (tests/guard/ tests the guard)
    options = EvalOptions(device="cpu", trials=2, seed=AFFINE_SEED, timeout_s=120, guard=False)
    evaluator = Evaluator(problems_dir / "affine.py", options)
    yield evaluator
    evaluator.close()


@pytest.fixture(scope="session")
def affine_eval(affine_evaluator, candidates_dir):
    """affine_eval("bad_mask.py") -> the Evaluation of that candidate, computed once per session."""
    results = {}

    def run(name: str):
        if name not in results:
            results[name] = affine_evaluator.evaluate(candidates_dir / name)
        return results[name]

    return run

