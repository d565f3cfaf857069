"""Problems in KernelBench form: checking, loading (with --set overrides), building model and
inputs with a seed on a device and precision, and measuring the problem's cost once."""

from __future__ import annotations

import ast
from contextlib import contextmanager, nullcontext
import hashlib
import importlib.util
import json
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from kfoundry import source_ast
from kfoundry.errors import ProblemError, UsageError
from kfoundry.types import ProblemCost

REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")
PRECISIONS = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
DEFAULT_TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 1e-2}
TF32_MIN_TOLERANCE = 5e-3  # TF32 inputs carry ~1e-3 relative error: tighter tolerances reject it


@dataclass
class ProblemSource:
    """A checked problem file with its overrides applied (not yet executed)."""

    path: Path
    text: str  # the file as written
    overrides: dict[str, Any] = field(default_factory=dict)

    def syntax_tree(self) -> ast.Module:
        """The code that runs: `text` with the --set overrides applied (line numbers kept)."""
        tree = source_ast.parse(self.text, filename=str(self.path))
        return apply_overrides(tree, self.overrides, self.path) if self.overrides else tree

    @property
    def content_hash(self) -> str:
        payload = json.dumps({"source": self.text, "set": self.overrides}, sort_keys=True, default=repr)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    @property
    def name(self) -> str:
        return self.path.stem


def parse_set_values(items: list[str] | None) -> dict[str, Any]:
    """Turn ["batch_size=4", "mode='x'"] into {"batch_size": 4, "mode": "x"}."""
    values: dict[str, Any] = {}
    for item in items or []:
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise UsageError(f"--set expects NAME=VALUE with NAME a Python identifier, got {item!r}")
        try:
            values[name] = source_ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError):
            values[name] = raw.strip()
    return values


def module_constants(tree: ast.Module) -> dict[str, tuple[ast.stmt, int | None]]:
    """Module-level names -> (assignment, position in a tuple target such as `d, h, w = 16, 64, 64`)."""
    constants: dict[str, tuple[ast.stmt, int | None]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    constants[target.id] = (node, None)
                elif isinstance(target, (ast.Tuple, ast.List)):
                    for i, element in enumerate(target.elts):
                        if isinstance(element, ast.Name):
                            constants[element.id] = (node, i)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            constants[node.target.id] = (node, None)
    return constants


def apply_overrides(tree: ast.Module, overrides: dict[str, Any], path: Path) -> ast.Module:
    """Give each overridden module-level constant its new value, in place, so constants derived from it
    later in the file follow it: where the file writes the name's own value (`n = 4`, or `h` of
    `h, w = 4, 4`) that value is replaced; otherwise (`h = w = 4`, `h, w = size()`) the assignment runs
    as written and one to the new value follows it, on the same line (tracebacks keep their lines)."""
    constants = module_constants(tree)
    following: dict[int, list[ast.stmt]] = {}  # id(statement) -> the overrides that run right after it
    for name, value in overrides.items():
        if name not in constants:
            known = ", ".join(sorted(n for n in constants if not n.startswith("_"))) or "none"
            raise UsageError(f"--set {name}: {path} has no module-level constant {name!r} (constants: {known})")
        node, position = constants[name]
        literal = source_ast.parse(repr(value), mode="eval").body  # lists and tuples too, not only scalars
        if not _replace_value(node, position, literal):
            following.setdefault(id(node), []).append(_assignment(name, literal, node))
    if following:
        tree.body = [after for node in tree.body for after in (node, *following.get(id(node), ()))]
    return ast.fix_missing_locations(tree)


def _replace_value(node: ast.stmt, position: int | None, literal: ast.expr) -> bool:
    """Put `literal` where the file writes the value of the name alone; False where it does not."""
    if isinstance(node, ast.AnnAssign) or (position is None and len(node.targets) == 1):
        _locate(literal, node.value)
        node.value = literal
        return True
    if position is None or len(node.targets) != 1:
        return False
    names, values = node.targets[0], node.value
    if not isinstance(values, (ast.Tuple, ast.List)) or len(values.elts) != len(names.elts):
        return False
    if any(isinstance(e, ast.Starred) for e in [*names.elts, *values.elts]):
        return False  # `a, *b = ...`: positions do not pair up
    _locate(literal, values.elts[position])
    values.elts[position] = literal
    return True


def _assignment(name: str, literal: ast.expr, after: ast.stmt) -> ast.Assign:
    assignment = ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=literal)
    _locate(assignment, after)
    return assignment


def _locate(new: ast.AST, old: ast.AST) -> None:
    for child in ast.walk(new):
        ast.copy_location(child, old)


def read_source(path: Path, error: type[Exception], what: str) -> str:
    """The text of a user's file, or `error` saying plainly why not."""
    if path.is_dir():
        raise error(f"the {what} is a file, and {path} is a folder: give the {what}'s .py file")
    if not path.is_file():
        raise error(f"{what} file not found: {path}")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"cannot read {what} file {path}: {exc}") from None


def read_problem(path: str | Path, overrides: dict[str, Any] | None = None) -> ProblemSource:
    """Check a problem file without running it: it exists, parses, and defines the three names."""
    path = Path(path)
    text = read_source(path, ProblemError, "problem")
    try:
        tree = source_ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        line = (exc.text or "").rstrip("\n")
        caret = " " * max((exc.offset or 1) - 1, 0) + "^"
        raise ProblemError(f"syntax error in problem {path}, line {exc.lineno}: {exc.msg}\n    {line}\n    {caret}") from None
    defined = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
    missing = [name for name in REQUIRED_NAMES if name not in defined]
    if missing:
        raise ProblemError(
            f"{path} is not a problem in KernelBench form: missing {', '.join(missing)} "
            "(a problem defines class Model(nn.Module), get_inputs() and get_init_inputs())"
        )
    overrides = dict(overrides or {})
    apply_overrides(tree, overrides, path)  # checks every name now, before anything runs
    return ProblemSource(path=path.resolve(), text=text, overrides=overrides)


def load_module(path: Path, source: str | ast.Module, module_name: str) -> ModuleType:
    """Execute `source` (text or syntax tree) as a module whose code objects name `path` (tracebacks and
    `inspect.getsource`, which Triton's @jit needs, point at the real file)."""
    spec = importlib.util.spec_from_loader(module_name, loader=None, origin=str(path))
    module = importlib.util.module_from_spec(spec)
    module.__file__ = str(path)
    sys.modules[module_name] = module
    code = compile(source, str(path), "exec")
    exec(code, module.__dict__)
    return module


_problem_folders: set[str] = set()  # folders load_problem_module put on sys.path


def problem_folders() -> frozenset[str]:
    """The problems' folders that this process put on its sys.path (each goes to its own problem's
    workers only: kfoundry.evaluate.parent.process)."""
    return frozenset(_problem_folders)


def _import_from_folder_of(path: Path) -> None:
    """The problem's folder first on sys.path, as `python problem.py` has it: its own modules import."""
    folder = str(path.resolve().parent)
    if sys.path[:1] == [folder]:
        return
    if folder not in sys.path:
        _problem_folders.add(folder)
    elif folder in _problem_folders:
        sys.path.remove(folder)  # ours, from an earlier load: moved, not repeated
    sys.path.insert(0, folder)


def load_problem_module(problem: ProblemSource) -> ModuleType:
    _import_from_folder_of(problem.path)
    try:
        module = load_module(problem.path, problem.syntax_tree(), f"kfoundry_problem_{problem.content_hash}")
    except Exception as exc:  # the user's problem file failed while running its top level
        raise ProblemError(f"problem {problem.path} failed to load: {type(exc).__name__}: {exc}") from None
    for name in REQUIRED_NAMES:
        if not hasattr(module, name):
            raise ProblemError(f"problem {problem.path} defines no {name} after loading")
    return module


def _host_only_mode(device: str):
    """A torch function mode that keeps a problem's tensors off the GPU while the main process reads it:
    `.cuda()` is the tensor itself, and a CUDA device given to a factory or to `.to()` becomes `device`
    (the meta device or the CPU). Made on use: torch is imported late."""
    import torch
    from torch.overrides import TorchFunctionMode

    def host(value):
        text = str(value) if isinstance(value, (str, torch.device)) else ""
        return device if text.startswith("cuda") else value

    class HostOnly(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func is torch.Tensor.cuda:
                return args[0]
            if "device" in kwargs:
                kwargs["device"] = host(kwargs["device"])
            if func is torch.Tensor.to:
                args = tuple(host(a) if i else a for i, a in enumerate(args))
            return func(*args, **kwargs)

    return HostOnly()


def _refuse_cuda() -> None:
    raise ProblemError("the problem asked for the GPU while kfoundry read it in its main process, which "
                       "never uses the GPU (its evaluation processes run the problem there)")


@contextmanager
def on_host(device: str = "cpu"):
    """While the main process loads, builds or runs a problem (sizing it, its signature, the composer's trace):
    whatever the problem asks of CUDA stays on `device`, and a CUDA context it would still make is refused,
    so that the main process never holds GPU memory (its evaluation processes run it on the GPU). In an API
    user's process that uses the GPU already, only the first part: the context is theirs. On the meta device,
    torch's meta kernels do not import torch._dynamo (kfoundry.dynamo_stand_in: a CPU-second a process)."""
    import torch

    from kfoundry.dynamo_stand_in import no_dynamo_import

    guard = not torch.cuda.is_initialized()
    lazy_init = torch.cuda._lazy_init
    if guard:
        torch.cuda._lazy_init = _refuse_cuda  # torch's one door to a CUDA context, looked up by name
    try:
        with _host_only_mode(device), (no_dynamo_import() if device == "meta" else nullcontext()):
            yield
    finally:
        if guard:
            torch.cuda._lazy_init = lazy_init


def torch_dtype(precision: str):
    import torch

    if precision not in PRECISIONS:
        raise UsageError(f"unknown precision {precision!r}: use one of {', '.join(PRECISIONS)}")
    return getattr(torch, PRECISIONS[precision])


def seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:
        pass


def cast_floats(value: Any, dtype, device=None) -> Any:
    """Cast floating tensors (nested in lists/tuples/dicts too) to dtype and move tensors to device."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.is_floating_point() and dtype is not None:
            value = value.to(dtype)
        return value.to(device) if device is not None else value
    if isinstance(value, (list, tuple)):
        return type(value)(cast_floats(v, dtype, device) for v in value)
    if isinstance(value, dict):
        return {k: cast_floats(v, dtype, device) for k, v in value.items()}
    return value


def _call_for_list(module: ModuleType, name: str, what: str) -> list:
    try:
        value = getattr(module, name)()
    except Exception as exc:
        raise ProblemError(f"{name}() of the problem raised {type(exc).__name__}: {exc}") from None
    if not isinstance(value, (list, tuple)):
        raise ProblemError(f"{name}() must return a list{what}, got {type(value).__name__}")
    return list(value)


def make_inputs(module: ModuleType, seed: int, dtype, device) -> list:
    """The problem's inputs for one trial: seeded get_inputs(), floats cast, on the device."""
    seed_everything(seed)
    return list(cast_floats(_call_for_list(module, "get_inputs", " of inputs"), dtype, device))


def init_inputs_of(module: ModuleType) -> list:
    return _call_for_list(module, "get_init_inputs", "")


def build_model(cls, init_inputs: list, seed: int, dtype, device, eval_mode: bool):
    """Construct like KernelBench does: the same seed right before construction, on the CPU,
    then cast and moved; training mode unless eval_mode."""
    seed_everything(seed)
    model = cls(*init_inputs)
    model = model.to(device=device, dtype=dtype) if dtype is not None else model.to(device)
    return model.eval() if eval_mode else model.train()


def tensor_bytes(value: Any) -> int:
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(tensor_bytes(v) for v in value.values())
    return 0


def measure_cost(model, inputs: list, outputs: Any) -> ProblemCost:
    """FLOPs by PyTorch's flop counter on one reference run; minimum bytes from the tensors."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    flops: int | None
    conv_flops: int | None
    try:
        counter = FlopCounterMode(display=False)
        with counter, torch.no_grad():
            model(*inputs)
        flops = int(counter.get_total_flops())
        by_op = counter.get_flop_counts().get("Global", {})
        conv_flops = int(sum(n for op, n in by_op.items() if "convolution" in str(op)))
    except Exception:
        flops = conv_flops = None
    parameter_bytes = sum(tensor_bytes(p) for p in model.parameters()) + sum(tensor_bytes(b) for b in model.buffers())
    return ProblemCost(
        flops=flops,
        input_bytes=tensor_bytes(inputs),
        output_bytes=tensor_bytes(outputs),
        parameter_bytes=parameter_bytes,
        conv_flops=conv_flops,
    )
