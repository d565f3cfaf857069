"""kfoundry.doctor.tiny_eval: the bundled problem and candidate, evaluated end to end."""

from kfoundry.doctor.tiny_eval import CANDIDATE, PROBLEM, check_eval


def test_the_bundled_candidate_is_ok_on_the_cpu():
    assert PROBLEM.is_file() and CANDIDATE.is_file()
    check = check_eval("cpu")
    assert check.ok and check.detail.startswith("the bundled problem and candidate: ok on cpu in "), check.text()
