"""Suite discovery: layouts, selection by number, files that are not problems, solution names."""

import pytest

from kfoundry.bench.suite import discover, find_solution, module_constants, parse_selection
from kfoundry.errors import UsageError
from tests.bench.helpers import EXAMPLES, NOT_A_PROBLEM, TINY, write_suite


def test_parse_selection():
    assert parse_selection("1-3,35") == {1, 2, 3, 35}
    assert parse_selection(" 7 ") == {7}
    for bad in ("1-", "a", "3-1", "1,,2"):
        with pytest.raises(UsageError, match="--problems"):
            parse_selection(bad)


def test_flat_suite_ordered_by_number_and_selected(tmp_path):
    write_suite(tmp_path, ["10_c.py", "2_b.py", "1_a.py", "4_d.py", "_private.py", "notes.txt"])
    suite = discover(tmp_path)
    assert [p.name for p in suite.problems] == ["1_a", "2_b", "4_d", "10_c"]
    assert [p.number for p in suite.problems] == [1, 2, 4, 10]
    assert [p.name for p in discover(tmp_path, problems="1-2,4").problems] == ["1_a", "2_b", "4_d"]
    with pytest.raises(UsageError, match="no problem of .* has such a leading number"):
        discover(tmp_path, problems="5-9")


def test_a_file_that_is_not_a_problem_is_skipped_with_its_reason(tmp_path):
    write_suite(tmp_path, ["1_a.py"])
    (tmp_path / "2_notes.py").write_text(NOT_A_PROBLEM)
    (tmp_path / "3_broken.py").write_text("def oops(:\n")
    suite = discover(tmp_path)
    assert [p.name for p in suite.problems] == ["1_a"]
    reasons = dict(suite.skipped)
    assert "missing Model, get_inputs, get_init_inputs" in reasons[str(tmp_path / "2_notes.py")]
    assert "syntax error" in reasons[str(tmp_path / "3_broken.py")]


def test_bad_suites_are_clear_errors(tmp_path):
    with pytest.raises(UsageError, match="not found"):
        discover(tmp_path / "missing")
    with pytest.raises(UsageError, match="no problem files"):
        discover(tmp_path)
    (tmp_path / "1_notes.py").write_text(NOT_A_PROBLEM)
    with pytest.raises(UsageError, match="none of its 1 file"):
        discover(tmp_path)


def test_kernelbench_level_layouts(tmp_path):
    write_suite(tmp_path / "level1", ["1_Square_matmul_.py", "2_Standard_matmul_.py"])
    write_suite(tmp_path / "KernelBench" / "level2", ["1_Conv2D_ReLU_BiasAdd.py"])
    with pytest.raises(UsageError, match="level1, level2|choose one with --level"):
        discover(tmp_path / "KernelBench")  # no files at the root: the levels are named
    level1 = discover(tmp_path, level=1)
    assert [p.name for p in level1.problems] == ["1_Square_matmul_", "2_Standard_matmul_"]
    assert level1.problems[0].level == 1
    assert [p.name for p in discover(tmp_path, level=2).problems] == ["1_Conv2D_ReLU_BiasAdd"]
    with pytest.raises(UsageError, match="no level3/"):
        discover(tmp_path, level=3)


def test_examples_layout():
    suite = discover(EXAMPLES)
    assert {p.name for p in suite.problems} == {"conv_relu", "layernorm", "linear_epilogue", "pointwise_chain",
                                                "row_softmax"}
    assert all(p.path.name == "problem.py" and p.number is None for p in suite.problems)


def test_solution_names(tmp_path):
    suite_dir = write_suite(tmp_path / "suite", ["1_a.py", "2_b.py", "3_c.py", "4_d.py"])
    (tmp_path / "sol" / "level1").mkdir(parents=True)
    (tmp_path / "sol" / "1_a.py").write_text("x")
    (tmp_path / "sol" / "2_b_new.py").write_text("x")
    (tmp_path / "sol" / "level_1_problem_3_sample_0_kernel.py").write_text("x")
    (tmp_path / "sol" / "level1" / "4_d.py").write_text("x")
    problems = {p.name: p for p in discover(suite_dir).problems}
    sol = tmp_path / "sol"
    assert find_solution(problems["1_a"], sol) == sol / "1_a.py"
    assert find_solution(problems["2_b"], sol) == sol / "2_b_new.py"
    assert find_solution(problems["3_c"], sol) is None  # KernelBench names need the level
    leveled = {p.name: p for p in discover(tmp_path / "suite", level=None).problems}
    assert find_solution(leveled["4_d"], sol) is None
    (tmp_path / "suite" / "level1").mkdir()
    for name in ("3_c.py", "4_d.py"):
        (tmp_path / "suite" / "level1" / name).write_text(TINY)
    at_level = {p.name: p for p in discover(tmp_path / "suite", level=1).problems}
    assert find_solution(at_level["3_c"], sol) == sol / "level_1_problem_3_sample_0_kernel.py"
    assert find_solution(at_level["4_d"], sol) == sol / "level1" / "4_d.py"
    assert find_solution(discover(EXAMPLES).problems[0], EXAMPLES).name == "kernel.py"  # examples/NAME/kernel.py


def test_module_constants(tmp_path):
    path = tmp_path / "p.py"
    path.write_text("a = 1\nb, c = 2, 3\nd: int = 4\ndef f():\n    e = 5\n")
    assert module_constants(path) == {"a", "b", "c", "d"}


def test_every_kernelbench_sample_of_a_problem_is_found(tmp_path):
    from kfoundry.bench.suite import SolutionFile, find_samples

    write_suite(tmp_path / "level1", ["23_Softmax.py", "24_LogSoftmax.py", "25_Swish.py"])
    suite = discover(tmp_path / "level1")  # KernelBench's levelN/ given as the suite: level N
    assert suite.level == 1 and all(p.level == 1 for p in suite.problems)
    sol = tmp_path / "sol"
    sol.mkdir()
    for name in ("level_1_problem_23_sample_0_kernel.py", "level_1_problem_23_sample_10_kernel.py",
                 "level_1_problem_23_sample_1_kernel.py", "level_1_problem_23_sample_x_kernel.py",
                 "level_2_problem_23_sample_2_kernel.py", "level_1_problem_24_sample_1_kernel.py", "25_Swish.py",
                 "level_1_problem_25_sample_0_kernel.py"):
        (sol / name).write_text("x")
    problems = {p.number: p for p in suite.problems}
    assert find_samples(problems[23], sol) == [SolutionFile(k, sol / f"level_1_problem_23_sample_{k}_kernel.py")
                                               for k in (0, 1, 10)]
    assert find_samples(problems[24], sol) == [SolutionFile(1, sol / "level_1_problem_24_sample_1_kernel.py")]
    assert find_samples(problems[25], sol) == [SolutionFile(0, sol / "25_Swish.py")]  # named like the problem: first
    assert find_solution(problems[24], sol) == sol / "level_1_problem_24_sample_1_kernel.py"
