"""kfoundry.evaluate.parent.size_check and `kfoundry eval --check-sizes`: a candidate judged again at a second size
set, with real evaluations on the CPU."""

import json

from kfoundry.evaluate.parent.size_check import check_sizes
from kfoundry.types import Evaluation
from tests.optimize.helpers import AFFINE, AFFINE_KERNEL, FIXTURES, eval_options

FIXED = FIXTURES / "candidates" / "affine_fixed_size.py"


def test_a_size_generic_candidate_holds_and_a_size_bound_one_does_not():
    holds = check_sizes(AFFINE, AFFINE_KERNEL, eval_options())
    assert holds.holds is True and holds.status == "ok"
    assert holds.verified_at == {"batch_size": 4, "dim": 250} and holds.other == {"batch_size": 3, "dim": 188}
    assert holds.summary() == "holds at other sizes: yes (batch_size=3, dim=188)"
    bound = check_sizes(AFFINE, FIXED, eval_options())
    assert bound.holds is False and bound.status == "runtime_error" and "view" in bound.message
    assert bound.summary().startswith("holds at other sizes: no (batch_size=3, dim=188: runtime_error: ")


def test_a_second_set_by_hand_and_one_that_changes_nothing():
    check = check_sizes(AFFINE, AFFINE_KERNEL, eval_options(set_values={"dim": 64}), {"dim": 33})
    assert check.holds is True and check.other == {"dim": 33} and check.verified_at["dim"] == 64
    same = check_sizes(AFFINE, AFFINE_KERNEL, eval_options(), {"dim": 250})
    assert same.holds is None and "verified one" in same.summary()


def test_eval_check_sizes_reports_it_and_fails_the_exit_code_where_it_does_not_hold():
    from tests.test_cli import in_process  # the command as the console script runs it, in this process

    args = ["eval", str(AFFINE), str(FIXED), "--device", "cpu", "--trials", "1"]
    done = in_process(*args, "--check-sizes", "--json")
    assert done.returncode == 1, done.stderr
    evaluation = Evaluation.from_dict(json.loads(done.stdout))
    assert evaluation.status == "ok" and evaluation.other_sizes.holds is False
    assert evaluation.precision["checked"] == "cpu"
    done = in_process(*args, "--check-set", "dim=125")
    assert done.returncode == 1 and "other sizes" in done.stdout and "dim=125" in done.stdout, done.stdout
