"""kfoundry.problem: checking problem files, --set overrides, building inputs and models, cost."""

import ast
import sys
from pathlib import Path

import pytest
import torch

from kfoundry.errors import ProblemError, UsageError
from kfoundry.problem import (build_model, cast_floats, init_inputs_of, load_problem_module, make_inputs,
                              measure_cost, parse_set_values, problem_folders, read_problem, torch_dtype)
from tests.helpers import marker_line


# -- read_problem: checks without running --------------------------------------------------------

def test_read_problem_without_overrides_keeps_the_file_as_written(problems_dir):
    path = problems_dir / "affine.py"
    problem = read_problem(path)
    assert problem.path == path.resolve()
    assert problem.name == "affine"
    assert problem.text == path.read_text()
    assert ast.dump(problem.syntax_tree()) == ast.dump(ast.parse(problem.text))
    assert problem.overrides == {}


def test_examples_are_valid_problems(examples_dir):
    names = sorted(p.parent.name for p in examples_dir.glob("*/problem.py"))
    assert names, "no examples found"
    for name in names:
        assert read_problem(examples_dir / name / "problem.py").name == "problem"


def test_missing_problem_file(tmp_path):
    with pytest.raises(ProblemError, match="problem file not found"):
        read_problem(tmp_path / "nope.py")


def test_a_directory_is_not_a_problem_file(tmp_path):
    with pytest.raises(ProblemError, match=r"the problem is a file, and .* is a folder: give the problem's .py file"):
        read_problem(tmp_path)


def test_unreadable_problem_file(tmp_path):
    path = tmp_path / "latin1.py"
    path.write_bytes(b"x = '\xe9\xff'\n")
    with pytest.raises(ProblemError, match="cannot read problem file"):
        read_problem(path)


def test_syntax_error_names_the_line(problems_dir):
    path = problems_dir / "bad" / "syntax_error.py"
    line = marker_line(path, "def forward(self, x)")
    with pytest.raises(ProblemError) as info:
        read_problem(path)
    message = str(info.value)
    assert f"line {line}" in message
    assert "expected ':'" in message
    assert "def forward(self, x)" in message


@pytest.mark.parametrize(
    "name, missing",
    [("no_model.py", "Model"), ("no_get_inputs.py", "get_inputs"), ("no_get_init_inputs.py", "get_init_inputs")],
)
def test_missing_required_names(problems_dir, name, missing):
    with pytest.raises(ProblemError) as info:
        read_problem(problems_dir / "bad" / name)
    message = str(info.value)
    assert f"missing {missing} " in message
    assert "KernelBench form" in message


def test_a_file_missing_everything_lists_all_three(tmp_path):
    path = tmp_path / "empty.py"
    path.write_text("import torch\n")
    with pytest.raises(ProblemError, match="missing Model, get_inputs, get_init_inputs"):
        read_problem(path)


# -- --set overrides ------------------------------------------------------------------------------

def test_override_is_followed_by_derived_constants(problems_dir):
    problem = read_problem(problems_dir / "derived.py", {"dim": 8})
    assert problem.overrides == {"dim": 8}
    assert "dim = 8" in ast.unparse(problem.syntax_tree())
    assert problem.text == (problems_dir / "derived.py").read_text()  # the file as written is kept
    module = load_problem_module(problem)
    assert module.dim == 8
    assert module.dim2 == 16  # dim2 = dim * 2 follows the override
    assert init_inputs_of(module) == [8, 16]
    (x,) = make_inputs(module, seed=0, dtype=torch.float32, device="cpu")
    assert x.shape == (8, 8)


def test_overrides_of_annotated_string_and_list_constants(problems_dir):
    module = load_problem_module(read_problem(problems_dir / "derived.py",
                                              {"eps": 1e-3, "mode": "max", "batch_size": 3}))
    assert module.eps == 1e-3
    assert module.mode == "max"
    assert module.batch_size == 3
    module = load_problem_module(read_problem(problems_dir / "derived.py", {"mode": [1, 2]}))
    assert module.mode == [1, 2]


def test_overrides_change_the_content_hash(problems_dir):
    path = problems_dir / "derived.py"
    plain = read_problem(path).content_hash
    assert read_problem(path, {"dim": 8}).content_hash == read_problem(path, {"dim": 8}).content_hash
    assert read_problem(path, {"dim": 8}).content_hash != plain
    assert read_problem(path, {"dim": 16}).content_hash != read_problem(path, {"dim": 8}).content_hash


def test_override_of_an_unknown_name_lists_the_constants(problems_dir):
    with pytest.raises(UsageError) as info:
        read_problem(problems_dir / "derived.py", {"hidden": 3})
    message = str(info.value)
    assert "no module-level constant 'hidden'" in message
    assert "batch_size, dim, dim2, eps, mode" in message


def _problem(tmp_path, name: str, sizes: str, init: str) -> Path:
    """A problem file whose sizes are written as `sizes` and whose get_init_inputs returns `init`."""
    path = tmp_path / name
    path.write_text(f"import torch\n{sizes}\nclass Model: pass\n"
                    f"def get_inputs(): return []\ndef get_init_inputs(): return {init}\n")
    return path


@pytest.mark.parametrize("overrides, expected", [
    ({"height": 16}, [16, 512, 16 * 512]),
    ({"width": 8}, [512, 8, 512 * 8]),
    ({"height": 16, "width": 8}, [16, 8, 128]),
])
def test_override_of_a_chained_assignment(tmp_path, overrides, expected):
    path = _problem(tmp_path, "chained.py", "height = width = 512\nn = height * width", "[height, width, n]")
    module = load_problem_module(read_problem(path, overrides))
    assert module.get_init_inputs() == expected


@pytest.mark.parametrize("overrides, expected", [
    ({"h": 2}, [2, 128, 256]),
    ({"w": 4}, [128, 4, 512]),
    ({"h": 2, "w": 4}, [2, 4, 8]),
])
def test_override_of_a_tuple_assignment_from_literals(tmp_path, overrides, expected):
    path = _problem(tmp_path, "pair.py", "h, w = 128, 128\nn = h * w", "[h, w, n]")
    module = load_problem_module(read_problem(path, overrides))
    assert module.get_init_inputs() == expected


def test_override_of_one_name_of_a_tuple_assignment(tmp_path):
    path = _problem(tmp_path, "tuple.py", "d, h, w = 16, 64, 64\nsize = d * h * w", "[size]")
    module = load_problem_module(read_problem(path, {"h": 2}))
    assert (module.d, module.h, module.w) == (16, 2, 64)
    assert module.get_init_inputs() == [16 * 2 * 64]


def test_override_of_names_unpacked_from_an_expression(tmp_path):
    path = _problem(tmp_path, "unpacked.py", "size = 64\nh, w = divmod(size, 3)\nn = h * w", "[h, w, n]")
    assert load_problem_module(read_problem(path)).get_init_inputs() == [21, 1, 21]
    assert load_problem_module(read_problem(path, {"h": 2})).get_init_inputs() == [2, 1, 2]
    assert load_problem_module(read_problem(path, {"h": 2, "w": 5})).get_init_inputs() == [2, 5, 10]
    # the unpacking still runs as written (the override follows it), so `size` still counts for it
    assert load_problem_module(read_problem(path, {"size": 7, "w": 5})).get_init_inputs() == [2, 5, 10]


def test_override_of_a_starred_unpacking_follows_the_statement(tmp_path):
    path = _problem(tmp_path, "starred.py", "a, *rest, b = 1, 2, 3, 4", "[a, rest, b]")
    assert load_problem_module(read_problem(path, {"b": 9})).get_init_inputs() == [1, [2, 3], 9]


def test_an_override_after_a_statement_keeps_the_line_numbers(tmp_path):
    path = tmp_path / "lines.py"
    path.write_text("import torch\nh, w = (\n    divmod(64, 3))\nclass Model:\n"
                    "    def boom(self):\n        raise ValueError(h)\n"
                    "def get_inputs(): return []\ndef get_init_inputs(): return [h, w]\n")
    module = load_problem_module(read_problem(path, {"h": 5}))
    assert module.get_init_inputs() == [5, 1]
    assert module.Model.boom.__code__.co_firstlineno == 5
    with pytest.raises(ValueError) as info:
        module.Model().boom()
    assert info.traceback[-1].lineno + 1 == 6  # pytest counts from 0


def test_an_unknown_name_beside_a_chained_assignment_is_still_refused(tmp_path):
    path = _problem(tmp_path, "chained.py", "height = width = 512", "[height]")
    with pytest.raises(UsageError, match="no module-level constant 'depth'.*height, width"):
        read_problem(path, {"depth": 3})


def test_overrides_keep_the_line_numbers_of_the_file(problems_dir):
    path = problems_dir / "derived.py"
    line = marker_line(path, "def forward(self, x):")
    module = load_problem_module(read_problem(path, {"dim": 8}))
    assert module.Model.forward.__code__.co_firstlineno == line


# -- parse_set_values -------------------------------------------------------------------------------

def test_parse_set_values_reads_python_literals_and_falls_back_to_strings():
    values = parse_set_values(["batch_size=4", "scale = 0.5", "shift=-0.25", "mode=max", "name='x y'",
                               "flag=True", "shape=(2, 3)", "empty="])
    assert values == {"batch_size": 4, "scale": 0.5, "shift": -0.25, "mode": "max", "name": "x y",
                      "flag": True, "shape": (2, 3), "empty": ""}
    assert isinstance(values["batch_size"], int)


def test_parse_set_values_of_nothing():
    assert parse_set_values(None) == {}
    assert parse_set_values([]) == {}


@pytest.mark.parametrize("item", ["batch_size", "=4", "1dim=4", "my-dim=4", "a.b=3"])
def test_parse_set_values_refuses_malformed_items(item):
    with pytest.raises(UsageError, match="--set expects NAME=VALUE"):
        parse_set_values([item])


# -- loading and running the problem ------------------------------------------------------------

def test_a_failing_top_level_is_a_problem_error(problems_dir):
    problem = read_problem(problems_dir / "bad" / "top_level_raises.py")  # parses and names everything
    with pytest.raises(ProblemError, match="failed to load: ModuleNotFoundError: No module named"):
        load_problem_module(problem)


def test_a_problem_imports_the_modules_beside_it_from_anywhere(tmp_path, monkeypatch):
    """As `python problem.py` has it: the problem's folder first on sys.path, whatever the working directory;
    a second load moves it first again rather than adding it twice."""
    folder = tmp_path / "proj"
    (folder / "kf_test_layers").mkdir(parents=True)
    (folder / "kf_test_layers" / "__init__.py").write_text("def scaled(x):\n    return 3 * x\n")
    (folder / "kf_test_sibling.py").write_text("SIZE = 7\n")
    path = folder / "problem.py"
    path.write_text("import torch\nfrom kf_test_layers import scaled\nfrom kf_test_sibling import SIZE\n"
                    "class Model(torch.nn.Module):\n    def forward(self, x):\n        return scaled(x)\n"
                    "def get_inputs(): return [torch.ones(SIZE)]\ndef get_init_inputs(): return []\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in ("kf_test_layers", "kf_test_sibling"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    module = load_problem_module(read_problem(path))
    assert sys.path[0] == str(folder.resolve())
    assert module.Model()(torch.ones(2)).tolist() == [3.0, 3.0]
    assert make_inputs(module, seed=0, dtype=torch.float32, device="cpu")[0].shape == (7,)
    assert str(folder.resolve()) in problem_folders()
    sys.path.insert(0, str(tmp_path))
    load_problem_module(read_problem(path))
    assert sys.path[0] == str(folder.resolve()) and sys.path.count(str(folder.resolve())) == 1


def test_get_inputs_raising_is_a_problem_error(problems_dir):
    module = load_problem_module(read_problem(problems_dir / "bad" / "get_inputs_raises.py"))
    with pytest.raises(ProblemError, match=r"get_inputs\(\) of the problem raised RuntimeError"):
        make_inputs(module, seed=0, dtype=torch.float32, device="cpu")


def test_get_inputs_and_get_init_inputs_must_return_lists(tmp_path):
    path = tmp_path / "not_lists.py"
    path.write_text("import torch\nclass Model(torch.nn.Module): pass\n"
                    "def get_inputs(): return torch.randn(3)\ndef get_init_inputs(): return 3\n")
    module = load_problem_module(read_problem(path))
    with pytest.raises(ProblemError, match=r"get_inputs\(\) must return a list of inputs, got Tensor"):
        make_inputs(module, seed=0, dtype=torch.float32, device="cpu")
    with pytest.raises(ProblemError, match=r"get_init_inputs\(\) must return a list, got int"):
        init_inputs_of(module)


def test_get_init_inputs_raising_is_a_problem_error(tmp_path):
    path = tmp_path / "init_raises.py"
    path.write_text("import torch\nclass Model(torch.nn.Module): pass\n"
                    "def get_inputs(): return []\ndef get_init_inputs(): return [1 / 0]\n")
    module = load_problem_module(read_problem(path))
    with pytest.raises(ProblemError, match=r"get_init_inputs\(\) of the problem raised ZeroDivisionError"):
        init_inputs_of(module)


def test_make_inputs_is_seeded_and_cast(problems_dir):
    module = load_problem_module(read_problem(problems_dir / "affine.py"))
    (a,) = make_inputs(module, seed=11, dtype=torch.float32, device="cpu")
    (b,) = make_inputs(module, seed=11, dtype=torch.float32, device="cpu")
    (c,) = make_inputs(module, seed=12, dtype=torch.float32, device="cpu")
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    (h,) = make_inputs(module, seed=11, dtype=torch.float16, device="cpu")
    assert h.dtype == torch.float16
    assert torch.equal(h, a.half())


def test_cast_floats_leaves_integers_and_structure():
    value = [torch.ones(2), (torch.arange(3), {"w": torch.zeros(1, dtype=torch.float64)}), 5]
    cast = cast_floats(value, torch.float16)
    assert cast[0].dtype == torch.float16
    assert cast[1][0].dtype == torch.int64
    assert cast[1][1]["w"].dtype == torch.float16
    assert isinstance(cast[1], tuple) and cast[2] == 5


def test_build_model_is_seeded_and_honours_eval_mode(problems_dir):
    module = load_problem_module(read_problem(problems_dir / "derived.py"))
    init = init_inputs_of(module)
    a = build_model(module.Model, init, seed=3, dtype=torch.float32, device="cpu", eval_mode=False)
    b = build_model(module.Model, init, seed=3, dtype=torch.float32, device="cpu", eval_mode=True)
    c = build_model(module.Model, init, seed=4, dtype=torch.float32, device="cpu", eval_mode=False)
    assert a.training and not b.training
    assert torch.equal(a.linear.weight, b.linear.weight)
    assert not torch.equal(a.linear.weight, c.linear.weight)
    h = build_model(module.Model, init, seed=3, dtype=torch.float16, device="cpu", eval_mode=False)
    assert h.linear.weight.dtype == torch.float16


def test_measure_cost_of_a_linear(problems_dir):
    module = load_problem_module(read_problem(problems_dir / "derived.py", {"dim": 8}))
    model = build_model(module.Model, init_inputs_of(module), seed=0, dtype=torch.float32, device="cpu",
                        eval_mode=False)
    inputs = make_inputs(module, seed=0, dtype=torch.float32, device="cpu")
    with torch.no_grad():
        out = model(*inputs)
    cost = measure_cost(model, inputs, out)
    assert cost.flops == 2 * 8 * 8 * 16  # batch 8, in 8, out 16
    assert cost.input_bytes == 8 * 8 * 4
    assert cost.output_bytes == 8 * 16 * 4
    assert cost.parameter_bytes == (16 * 8 + 16) * 4
    assert cost.min_bytes == cost.input_bytes + cost.output_bytes
    assert cost.conv_flops == 0  # a GEMM: TF32 convolutions leave its reference fp32


def test_measure_cost_counts_the_convolutions_flops():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(144, 2))
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        cost = measure_cost(model, [x], model(x))
    conv = 2 * 2 * 4 * 6 * 6 * 3 * 3 * 3  # batch, out channels, output positions, in channels x taps
    assert cost.conv_flops == conv and cost.flops == conv + 2 * 2 * 144 * 2


def test_torch_dtype():
    assert torch_dtype("fp32") is torch.float32
    assert torch_dtype("fp16") is torch.float16
    assert torch_dtype("bf16") is torch.bfloat16
    with pytest.raises(UsageError, match="unknown precision 'fp8'"):
        torch_dtype("fp8")


CUDA_ASKING = """import torch
import torch.nn as nn

OFFSET = torch.ones(1).cuda()


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(64, 32).cuda()

    def forward(self, x):
        return self.linear(x.to("cuda")) + torch.zeros(32, device="cuda")


def get_inputs():
    return [torch.randn(16, 64).cuda()]


def get_init_inputs():
    return []
"""


def test_the_main_process_reads_a_problem_that_asks_for_cuda_on_the_host(tmp_path):
    """Problems written for a GPU box call .cuda(): read in the main process (sizing, signature, the composer),
    what they ask of CUDA stays on the meta device or the CPU, and no CUDA context can be made meanwhile."""
    import torch

    from kfoundry.evaluate.parent.memory_plan import problem_sizes
    from kfoundry.problem import on_host
    from kfoundry.problem_signature import signature

    path = tmp_path / "asks_cuda.py"
    path.write_text(CUDA_ASKING)
    sizes = problem_sizes(read_problem(path), "fp32", False)
    assert (sizes.input_bytes, sizes.output_bytes) == (16 * 64 * 4, 16 * 32 * 4)
    recorded = signature(path)
    assert "aten.addmm" in recorded["ops"] and recorded["outputs"] == [{"shape": [16, 32], "dtype": "float32"}]
    before = torch.cuda._lazy_init
    with on_host(), pytest.raises(ProblemError, match="never uses the GPU"):
        torch.cuda._lazy_init()
    assert torch.cuda._lazy_init is before and not torch.cuda.is_initialized()
