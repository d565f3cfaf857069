"""Findings for the failing verdicts other than wrong_output and cheating: compile_error,
runtime_error, timeout and crash. One finding of severity "error" names the cause, where it is and
what to do; "warning" and "info" findings point at the likely culprits (the lint's loads and stores
without masks, the launch that sets a block size, the loops that may never end).

The evidence is what the worker recorded in `evaluation.error` (kfoundry.evaluate.worker.failures): the
exception, the candidate's frame, and for kernels `error["triton"]` (triton_errors) and
`error["nvcc"]` (cuda_errors); for a crash, the signal and the tail of the worker's stderr.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from kfoundry import source_ast
from kfoundry.diagnose.cuda_errors import build_error_details, undefined_symbol
from kfoundry.diagnose.lint import lint_finding, lint_kernels
from kfoundry.types import DiagnosticFinding, Evaluation, SourceLocation

STATUSES = ("compile_error", "runtime_error", "timeout", "crash")
TRITON_TYPES = ("CompilationError", "CompileTimeAssertionFailure", "UnsupportedLanguageConstruct",
                "InterpreterError", "OutOfResources", "PTXASError")
OOM = ("out of memory", "can't allocate memory", "cannot allocate memory", "outofmemoryerror")
# torch appends "Compile with TORCH_USE_CUDA_DSA to enable device-side assertions" to every CUDA
# error, so the assert needle is the full "triggered" phrase
CUDA_FAULTS = (("illegal memory access", "illegal-address"), ("misaligned address", "misaligned"),
               ("operation not supported on global/shared address space", "illegal-address"),
               ("device-side assert triggered", "device-assert"), ("unspecified launch failure", "launch-failure"),
               ("illegal instruction", "illegal-instruction"), ("an illegal", "illegal-address"))
UNMASKED = ("load-without-mask", "store-without-mask")
MAX_SUPPORT = 4

ALIASES = {"tl": "import triton.language as tl", "triton": "import triton", "torch": "import torch",
           "nn": "import torch.nn as nn", "F": "import torch.nn.functional as F", "math": "import math",
           "load_inline": "from torch.utils.cpp_extension import load_inline"}


def error_findings(evaluation: Evaluation, source: str | None) -> list[DiagnosticFinding]:
    """What went wrong, where and what to do, for compile_error, runtime_error, timeout and crash;
    [] for any other status. `source` is the candidate's text (its lint adds the likely culprits)."""
    if evaluation.status not in STATUSES:
        return []
    case = _Case(evaluation, source)
    if evaluation.status == "timeout":
        return _timeout(case)
    if evaluation.status == "crash":
        return _crash(case)
    kind = case.error.get("type")
    text = case.text
    if kind in ("SyntaxError", "IndentationError", "TabError"):
        return _syntax(case)
    if kind == "NeedsGPU":
        return [case.finding("device", "a CUDA C++ candidate cannot run in a CPU evaluation",
                             [evaluation.message],
                             "evaluate it on a GPU machine (--device cuda), or write the kernel in Triton, which "
                             "runs on CPU through the interpreter", location=None)]
    if kind == "MissingModelNew":
        return [case.finding("interface", evaluation.message, [],
                             "define `class ModelNew(nn.Module)` whose __init__ takes the same arguments as "
                             "Model's (get_init_inputs()) and whose forward takes get_inputs()", location=None)]
    if case.error.get("nvcc") or "Error building extension" in text or "undefined symbol" in text:
        found = _build(case)
        if found:
            return found
    if case.error.get("triton") or kind in TRITON_TYPES:
        return _triton(case)
    if kind in ("ModuleNotFoundError", "ImportError"):
        return _import(case)
    if kind == "NameError" and evaluation.phase == "load":
        name = _quoted(case.error.get("message", ""))
        if name in ALIASES:
            return _import(case, missing_name=name)
    return _runtime(case)


class _Case:
    """One failing evaluation and what is known of it."""

    def __init__(self, evaluation: Evaluation, source: str | None) -> None:
        self.evaluation = evaluation
        self.error: dict[str, Any] = dict(evaluation.error or {})
        self.source = source
        self.path = evaluation.candidate or self.error.get("file") or None
        self.lines = source.splitlines() if source else []
        self.text = " ".join(str(self.error.get(k) or "") for k in ("message", "traceback")) + " " + evaluation.message
        self._lint: list[dict[str, Any]] | None = None

    @property
    def lint(self) -> list[dict[str, Any]]:
        if self._lint is None:
            self._lint = lint_kernels(self.source) if self.source else []
        return self._lint

    def line_text(self, line: int | None) -> str | None:
        if line and 0 < line <= len(self.lines):
            return self.lines[line - 1].strip()
        return None

    def location(self, line: int | None = None, column: int | None = None, text: str | None = None,
                 function: str | None = None, file: str | None = None) -> SourceLocation | None:
        if not line:
            return None
        return SourceLocation(file=file or self.path, line=line, column=column,
                              text=text if text is not None else self.line_text(line),
                              function=function or self.function_at(line))

    def frame_location(self) -> SourceLocation | None:
        e = self.error
        if not e.get("line"):
            return None
        return self.location(e["line"], e.get("column"), e.get("text"), e.get("function"), e.get("file"))

    def function_at(self, line: int) -> str | None:
        """The innermost Python function of the candidate around `line`."""
        if not self.source:
            return None
        try:
            tree = source_ast.parse(self.source)
        except SyntaxError:
            return None
        best = None
        for node in ast.walk(tree):
            inside = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                node.lineno <= line <= (node.end_lineno or 0))
            if inside and (best is None or node.lineno > best.lineno):
                best = node
        return best.name if best else None

    def finding(self, category: str, title: str, evidence: list[str], direction: str, *,
                location: SourceLocation | None, severity: str = "error",
                data: dict[str, Any] | None = None) -> DiagnosticFinding:
        return DiagnosticFinding(category=category, severity=severity, title=_clip(title),
                                 evidence=[e for e in evidence if e], location=location, direction=direction,
                                 data={"phase": self.evaluation.phase, **(data or {})})

    def lint_support(self, rules: set[str] | tuple[str, ...], severity: str = "warning",
                     skip_line: int | None = None, kernels: set[str] | None = None) -> list[DiagnosticFinding]:
        items = [i for i in self.lint if i["rule"] in rules and i["line"] != skip_line
                 and (not kernels or i["kernel"] in kernels)]
        return [lint_finding(i, self.path, severity) for i in items[:MAX_SUPPORT]]


def _clip(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _first_line(text: str) -> str:
    return next((line.strip() for line in str(text).splitlines() if line.strip()), "")


def _quoted(text: str) -> str | None:
    found = re.search(r"'([^']+)'", text or "")
    return found.group(1) if found else None


# -- syntax and imports -----------------------------------------------------------------------------

def _syntax(case: _Case) -> list[DiagnosticFinding]:
    e = case.error
    line, column, text, message = e.get("line"), e.get("column"), e.get("text") or "", e.get("message", "")
    raw = case.lines[line - 1] if line and 0 < line <= len(case.lines) else text
    indent = len(raw) - len(raw.lstrip())
    caret = " " * max((column or 1) - 1 - indent, 0) + "^" if column else ""
    lowered = message.lower()
    where = f"line {line}"
    if text.startswith("```"):
        direction = f"remove the markdown code fence at {where}: the candidate must be plain Python"
    elif "expected ':'" in lowered:
        direction = f"add the ':' that ends the def/class/if/for header at {where}"
    elif "indent" in lowered:
        direction = f"fix the indentation at {where}: blocks must be indented consistently (spaces only)"
    elif "never closed" in lowered or "unmatched" in lowered or "does not match opening" in lowered:
        direction = f"balance the brackets around {where}: one is opened or closed without its pair"
    elif "unterminated" in lowered:
        direction = (f"close the string that starts at {where} (a CUDA or C++ source string needs its closing "
                     "triple quote)")
    else:
        direction = f"fix the Python syntax at {where} ({message}): the file must parse before any kernel compiles"
    return [case.finding("syntax", f"Python syntax error at {where}: {message}",
                         [text, caret], direction,
                         location=case.location(line, column, text or None, file=e.get("file")),
                         data={"message": message})]


def _import_line(case: _Case, module: str | None) -> int | None:
    if not case.source or not module:
        return None
    try:
        tree = source_ast.parse(case.source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == module or module.startswith(a.name + ".")
                                                or a.name.startswith(module + ".") for a in node.names):
            return node.lineno
        if isinstance(node, ast.ImportFrom) and node.module and (node.module == module
                                                                 or node.module.startswith(module + ".")):
            return node.lineno
    return None


def _import(case: _Case, missing_name: str | None = None) -> list[DiagnosticFinding]:
    e = case.error
    message = e.get("message", "")
    settings = case.evaluation.settings or {}
    versions = ", ".join(f"{k} {settings[k]}" for k in ("torch", "triton") if settings.get(k))
    if missing_name:
        location = case.frame_location()
        return [case.finding("import", f"`{missing_name}` is used but never imported: {message}", [message],
                             f"add `{ALIASES[missing_name]}` at the top of the file", location=location,
                             data={"name": missing_name})]
    module, name = None, None
    found = re.search(r"No module named '([^']+)'", message)
    if found:
        module = found.group(1)
    found = re.search(r"cannot import name '([^']+)' from '([^']+)'", message)
    if found:
        name, module = found.group(1), found.group(2)
    location = case.frame_location() or case.location(_import_line(case, module))
    top = (module or "").split(".")[0]
    what = f"`{name}` from `{module}`" if name else f"`{module}`"
    if top in ("triton", "torch"):
        direction = (f"{what} does not exist in this version ({versions or 'the installed torch and Triton'}): "
                     "use the names it has (check the module path: e.g. libdevice is "
                     "triton.language.extra.libdevice in Triton 3.x) or write the function with tl / torch "
                     "operations")
    else:
        direction = (f"remove the import of {what}: candidates run with torch and Triton only (and the standard "
                     "library), no third-party packages and no files beside the candidate; write the kernel in "
                     "the file itself (Triton, or CUDA C++ through torch.utils.cpp_extension.load_inline)")
    return [case.finding("import", f"cannot import {what}" if module else f"import failed: {_first_line(message)}",
                         [message], direction, location=location, data={"module": module, "name": name})]


# -- Triton -------------------------------------------------------------------------------------------

TRITON_CAUSES: list[tuple[str, str, str]] = [
    # (cause, regular expression over the message, direction)
    ("block-too-large", r"exceeds triton maximum tensor numel",
     "the block has more than 1,048,576 elements: loop over tiles of the row / tensor instead of one block"),
    ("not-constexpr", r"must be of type tl\.constexpr|must have type `constexpr|is not a constexpr|"
                      r"must be a constexpr",
     "block shapes must be compile-time constants: annotate the size parameter `: tl.constexpr`, pass it as a "
     "keyword at the launch (BLOCK=...), and mask with the run-time size (mask = offs < n)"),
    ("not-pow2", r"power of 2|power of two",
     "tl.arange lengths and block dimensions must be powers of 2: on the host use BLOCK = "
     "triton.next_power_of_2(n) and mask the tail (mask = offs < n, other=0.0 on loads)"),
    ("dot-shape", r"Input shapes should have M >=|K >= 16|K >= 32",
     "tl.dot needs K >= 16 on NVIDIA GPUs (and M, N >= 16 to use tensor cores): raise BLOCK_K (and BLOCK_M, "
     "BLOCK_N) to 16 or more and mask the tails; the CPU interpreter accepts smaller tiles, a GPU build does not"),
    ("dot-operands", r"not compatible for matmul|must be either 2D or 3D",
     "tl.dot multiplies an [M, K] block by a [K, N] block: check the operands' shapes (load b as [K, N], or "
     "tl.trans it)"),
    ("block-pointer-mask", r"cannot be specified for loading block pointers|boundary_check",
     "block pointers take boundary_check=(0, 1) and padding_option='zero' instead of mask= and other="),
    ("store-value", r"cannot cast pointer|Value argument cannot be block type|Unsupported ptr type .* `tl\.store`|"
                    r"Expected pointer argument to have shape|Cannot store to a constant pointer",
     "tl.store writes a value of the pointer's element type and block shape: store the computed tensor (not a "
     "pointer such as x_ptr + offs), cast it with .to(y_ptr.dtype.element_ty), and give pointer, value and mask "
     "the same block shape"),
    ("load-arguments", r"Mask argument cannot be block type|Other argument cannot be block type|"
                       r"Unsupported ptr type .* `tl\.load`",
     "tl.load's mask and other must match its pointer: a block of pointers takes a block mask (offs < n) and a "
     "scalar other; a scalar pointer takes neither block"),
    ("shape-mismatch", r"Cannot broadcast|incompatible dimensions|make_shape_compatible|rank mismatch",
     "two blocks of different shapes meet at this line: index with [:, None] and [None, :] so rows and columns "
     "broadcast, and keep pointers, values and masks the same shape"),
    ("dtype-mismatch", r"invalid operands of type|IncompatibleType|cannot cast|incompatible type|"
                       r"cannot add pointers|dtype",
     "the operand types do not combine: cast explicitly (x.to(tl.float32), value.to(y_ptr.dtype.element_ty)); "
     "pointers take integer offsets only, never floats or other pointers"),
    ("undefined-name", r"is not defined|NameError",
     "the kernel uses a name Triton cannot see: a module global used in a kernel must be a tl.constexpr "
     "(NAME = tl.constexpr(4)) or an argument; Python and torch functions cannot be called inside a kernel"),
    ("unsupported", r"unsupported AST node|not supported|UnsupportedLanguageConstruct|unsupported",
     "this Python construct is not allowed in a @triton.jit kernel (lists, dicts, try, recursion, calls to Python "
     "or torch functions): express it with tl operations (tl.where, masks, tl.static_range)"),
    ("out-of-resources", r"out of resource|OutOfResources",
     "the kernel needs more shared memory or registers than the GPU has: reduce BLOCK sizes or num_stages "
     "(shared memory holds num_stages copies of the tiles)"),
    ("ptxas", r"PTXAS error",
     "ptxas rejected the code Triton generated: most often a block too large for the registers; reduce BLOCK sizes "
     "or num_warps, and report the message if it persists"),
    ("static-assert", r"static_assert|CompileTimeAssertionFailure",
     "a tl.static_assert failed for the constexpr values of this launch: pass values that satisfy it"),
]
CAUSE_RULES = {"not-constexpr": {"block-not-constexpr"},
               "not-pow2": {"arange-not-pow2", "shape-not-pow2", "launch-not-pow2"},
               "dot-shape": {"dot-small-block"},
               "load-arguments": {"load-without-mask", "load-mask-without-other"},
               "store-value": {"store-without-mask"}}


CAUSE_DIRECTIONS = {cause: direction for cause, _, direction in TRITON_CAUSES}


def triton_cause(message: str, text: str = "") -> tuple[str, str]:
    """(cause, direction) for a Triton error message (and the failing line's text)."""
    for cause, pattern, direction in TRITON_CAUSES:
        if re.search(pattern, message or "", re.IGNORECASE if cause == "unsupported" else 0):
            if cause == "dtype-mismatch" and "tl.store" in (text or ""):
                cause = "store-value"  # the interpreter's "cannot cast [addresses] to <[N], fp32>"
            return cause, CAUSE_DIRECTIONS[cause]
    return "other", "fix the kernel at the line shown; the message is Triton's"


def _triton(case: _Case) -> list[DiagnosticFinding]:
    e = case.error
    details = dict(e.get("triton") or {})
    message = details.get("message") or e.get("message") or case.evaluation.message
    message = _essential(message)
    line = details.get("line") or e.get("line")
    text = details.get("text") or e.get("text") or case.line_text(line)
    kernel = details.get("kernel")
    cause, direction = triton_cause(message, text or "")
    if details.get("file") and case.path and details["file"] != case.path:
        location = SourceLocation(file=details["file"], line=line, column=details.get("column"), text=text,
                                  function=kernel)
    else:
        location = case.location(line, details.get("column"), text, kernel)
    kernels = {kernel} | {c.get("kernel") for c in details.get("calls") or []}
    kernels.discard(None)
    if cause == "not-constexpr":
        params = sorted({re.search(r"`(\w+)`", i["message"]).group(1) for i in case.lint
                         if i["rule"] == "block-not-constexpr" and (not kernels or i["kernel"] in kernels)})
        if params:
            direction = (f"annotate {', '.join(f'`{p}: tl.constexpr`' for p in params)} in the kernel's signature "
                         "(block shapes must be compile-time constants), pass it as a keyword at the launch, and "
                         "keep the run-time size as a separate argument for the mask (offs < n)")
    evidence = [f"{details.get('exception') or e.get('type') or 'error'}: {message}"]
    evidence += [f"called from `{c.get('kernel')}` at line {c['line']}: {c.get('text', '')}"
                 for c in reversed(details.get("calls") or []) if c.get("line")]
    launch = details.get("launch")
    if launch and launch.get("line"):
        evidence.append(f"launched at line {launch['line']}: {launch.get('text', '')}")
    if details.get("mode") == "interpreter":
        evidence.append("found by the Triton interpreter (CPU); a GPU build fails the same way")
    where = f" at line {line}" if line else ""
    title = f"Triton kernel `{kernel}` does not compile{where}: {message}" if kernel else \
        f"Triton compilation failed{where}: {message}"
    findings = [case.finding("triton-compile", title, evidence, direction, location=location,
                             data={"cause": cause, "kernel": kernel, "message": message, "mode": details.get("mode")})]
    relevant = CAUSE_RULES.get(cause, set())
    findings += case.lint_support(relevant, "warning", skip_line=line, kernels=None)
    others = set(UNMASKED) - relevant
    findings += case.lint_support(others, "info", kernels=kernels or None)[:2]
    return findings


def _essential(message: str) -> str:
    """The line that says what is wrong: Triton's CompilationError puts it after the source excerpt."""
    lines = [line for line in str(message).splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].startswith("at ") and re.match(r"at \d+:\d+:", lines[0]):
        return lines[-1].strip()
    return " ".join(lines).strip()


# -- CUDA C++ builds ---------------------------------------------------------------------------------

BUILD_CAUSES: list[tuple[str, str]] = [
    (r'identifier "(?P<name>[^"]+)" is undefined|[‘\'`](?P<name2>[^’\'`]+)[’\'`] was not declared',
     "`{name}` is not declared where this line uses it: declare it or pass it in (a kernel sees only its "
     "arguments, its locals and __device__/__constant__ globals), fix its spelling, or #include its header"),
    (r"calling a __host__ function|from a __global__ function|from a __device__ function.*not allowed",
     "device code can call only __device__ functions: use CUDA's device math (expf, fmaxf, rsqrtf) instead of "
     "host functions (std::exp, torch ops)"),
    (r"no instance of|no matching function|no suitable conversion|cannot be used to initialize|"
     r"argument of type|invalid conversion|cannot convert",
     "the types do not match the call: check argument types (data_ptr<float>() on float32 tensors, int64_t "
     "sizes, float vs double scalars from Python) against the function's signature"),
    (r"too much shared data|uses too much shared",
     "the kernel's static shared memory is over the limit (48 KB static per block): shrink the __shared__ "
     "tiles, or use dynamic shared memory (extern __shared__ + cudaFuncSetAttribute)"),
    (r"undefined symbol|undefined reference",
     "`{name}` is declared (cpp_sources, functions=) but not defined with the same signature: make the "
     "definition in cuda_sources match the declaration exactly (types, const, references)"),
    (r"cannot open source file|No such file or directory",
     "the #include names a header that is not available: only the CUDA toolkit, the C++ standard library and "
     "torch's headers are on the include path"),
    (r"redefinition|already been defined|multiple definition",
     "defined twice: cpp_sources and cuda_sources are separate files; declare in cpp_sources, define once in "
     "cuda_sources (and do not bind with PYBIND11_MODULE when functions= is given)"),
    (r"expected",
     "C++ syntax: a missing ';', bracket or parenthesis at this line or just before it"),
]


def build_direction(details: dict[str, Any]) -> str:
    message = details.get("message", "")
    if details.get("compiler") == "toolchain":
        return f"{message}; evaluate CUDA candidates on a machine with the CUDA toolkit"
    if details.get("source_kind") == "bindings":
        return ("the error is in the pybind11 bindings load_inline writes for functions=: every name listed there "
                "must be declared in cpp_sources with a signature pybind11 can bind")
    for pattern, direction in BUILD_CAUSES:
        found = re.search(pattern, message)
        if found:
            named = {k: v for k, v in found.groupdict().items() if v}
            name = next(iter(named.values()), None) or details.get("function") or "the function"
            return direction.format(name=name)
    return f"fix the {details.get('compiler', 'compiler')} error at this line of the source string"


def _build(case: _Case) -> list[DiagnosticFinding]:
    e = case.error
    details = e.get("nvcc")
    if not details:
        log = "\n".join(str(e.get(k) or "") for k in ("traceback", "message"))
        details = build_error_details(log, case.source, case.path)
        if details is None:
            details = undefined_symbol(log, case.source, case.path)
        if details is None and "Error building extension" in log:
            details = {"compiler": "build", "message": _first_line(e.get("message", "")), "context": []}
    if not details:
        return []
    compiler, message = details.get("compiler", "compiler"), details.get("message", "")
    line = details.get("line")
    location = case.location(line, None, details.get("text"), details.get("function")) if line else None
    if location is not None and details.get("function"):
        location.function = details["function"]
    where = ""
    if line:
        where = f" at line {line}"
        if details.get("source_kind") in ("cuda_sources", "cpp_sources"):
            where += f" (line {details.get('string_line')} of {details.get('variable') or details['source_kind']})"
        elif details.get("source_kind"):
            where += f" ({details['source_kind']})"
    evidence = [details.get("error_line", "")]
    if location is None:  # else the location shows the line; the compiler's carets do not survive rendering
        evidence += [c.strip() for c in (details.get("context") or [])[:2] if set(c.strip()) - set("^~| ")]
    if details.get("header"):
        evidence.append(f"inside {details['header']['file']}:{details['header']['line']}, reached from this line")
    if details.get("instantiated_line"):
        evidence.append(f"instantiated at line {details['instantiated_line']}")
    if (details.get("errors") or 0) > 1:
        evidence.append(f"{details['errors']} errors in the build; the first is the one to fix")
    return [case.finding("nvcc", f"{compiler} error{where}: {message}", evidence, build_direction(details),
                         location=location,
                         data={k: details.get(k) for k in ("compiler", "message", "source_kind", "string_line",
                                                          "generated_file", "log_line", "extension", "errors")
                               if details.get(k) is not None})]


# -- run time -------------------------------------------------------------------------------------

def _cuda_fault(text: str) -> str | None:
    lowered = text.lower()
    if "cuda" not in lowered and "device-side" not in lowered:
        return None
    for needle, kind in CUDA_FAULTS:
        if needle in lowered:
            return kind
    return None


def _bytes(text: str) -> str | None:
    found = re.search(r"tried to allocate (\d+) bytes", text, re.IGNORECASE)
    if found:
        return f"{int(found.group(1)) / 2**30:.2f} GiB"
    found = re.search(r"Tried to allocate ([\d.]+ [KMGT]iB)", text)
    return found.group(1) if found else None


RUNTIME_CAUSES: list[tuple[str, str]] = [
    (r"Pointer argument cannot be accessed from Triton|cpu tensor\?",
     "a tensor given to the kernel is not on the GPU: create every tensor with device=x.device"),
    (r"grid must have at most 3 dimensions|grid",
     "the launch grid is wrong: give a tuple of at most 3 positive ints (triton.cdiv(n, BLOCK),)"),
    (r"mat1 and mat2|size of tensor|must match the size|shape|view size is not compatible|invalid for input of size|"
     r"dimension",
     "shapes do not line up at this line: print them; use .reshape (not .view) on non-contiguous tensors and "
     "return the reference's output shape"),
    (r"expected scalar type|dtype|Expected .* but found|result type",
     "dtypes do not match: keep the reference's dtype (allocate outputs with dtype=x.dtype) and cast explicitly"),
]


def _runtime(case: _Case) -> list[DiagnosticFinding]:
    e, evaluation = case.error, case.evaluation
    kind, message = e.get("type") or "error", e.get("message") or evaluation.message
    phase = evaluation.phase
    location = case.frame_location()
    frames = e.get("frames") or []
    calls = [f"called from `{f.get('function')}` at line {f['line']}: {f.get('text', '')}"
             for f in reversed(frames[:-1]) if f.get("line")]
    full = " ".join([message, evaluation.message])
    lowered = full.lower()
    if "[out of memory]" in evaluation.message or kind in ("MemoryError", "OutOfMemoryError") or any(
            p in lowered for p in OOM):
        size = _bytes(full)
        title = f"out of memory in phase {phase}" + (f": tried to allocate {size}" if size else "")
        direction = ("the candidate asks for more memory than the device has: check the size arithmetic at this line "
                     "(a product of the wrong dimensions, numel squared, a wrong dtype), allocate only the output "
                     "the reference returns, and fuse instead of materialising large intermediates")
        return [case.finding("out-of-memory", title, [f"{kind}: {_first_line(message)}", *calls[:2]], direction,
                             location=location, data={"requested": size, "device": evaluation.device})]
    fault = _cuda_fault(full)
    if fault:
        directions = {
            "misaligned": "a vectorized access (float4, 16-byte loads) at an address not aligned to its width: keep "
                          "offsets multiples of the vector width, or handle misaligned heads and tails with scalar "
                          "accesses",
            "device-assert": "a device-side assertion fired (an index out of range in an indexing op, or a "
                             "tl.device_assert): check indices against sizes; rerun with CUDA_LAUNCH_BLOCKING=1",
        }
        direction = directions.get(fault, (
            "a kernel read or wrote outside its tensors: mask every tl.load / tl.store with the bounds "
            "(mask=offs < n, other= on loads), check the index math (strides, row vs column, int32 overflow past "
            "2**31 elements), and guard CUDA C++ threads with if (i < n). CUDA reports faults asynchronously: the "
            "line shown is where it surfaced; compute-sanitizer names the kernel"))
        findings = [case.finding("cuda-fault", f"CUDA fault ({fault}) in phase {phase}: {_first_line(message)}",
                                 [f"{kind}: {_first_line(message)}", "reported at the line shown (asynchronously)"],
                                 direction, location=location, data={"fault": fault})]
        return findings + case.lint_support(UNMASKED, "warning")
    if kind == "NameError" and _quoted(message) in ALIASES:
        direction = f"add `{ALIASES[_quoted(message)]}` at the top of the file"
    elif phase == "init":
        direction = ("ModelNew's constructor failed: it must take the same arguments as Model (get_init_inputs()) "
                     "and build its parameters the same way")
    elif kind == "IndexError" or "index out of range" in lowered or "out of bounds" in lowered:
        direction = ("the code indexes past a dimension: check what forward assumes about its inputs (x.dim(), "
                     "x.shape) against get_inputs(), and derive sizes from the tensors rather than constants")
    elif kind == "AssertionError":
        direction = ("an assertion in the candidate failed: the assumption it checks (shape, dtype, contiguity) does "
                     "not hold for the problem's inputs; support those inputs or fix the assertion")
    elif kind == "TypeError" and re.search(r"positional argument|keyword argument|missing \d+ required", message):
        direction = ("a call's arguments do not match its signature: check each kernel launch against the "
                     "@triton.jit parameters (constexprs as keywords) and forward against get_inputs()")
    elif kind == "ZeroDivisionError":
        direction = "a size or block count is 0: derive it from the input (triton.cdiv(n, BLOCK)) and check n > 0"
    else:
        direction = next((d for pattern, d in RUNTIME_CAUSES if re.search(pattern, message, re.IGNORECASE)),
                         "fix the exception at the candidate's line shown; the evidence is the exception's message")
    where = f" in `{location.function}` at line {location.line}" if location and location.line else f" in phase {phase}"
    return [case.finding("runtime", f"{kind}{where}: {_first_line(message)}",
                         [f"{kind}: {_clip(message, 400)}", *calls[:3]], direction, location=location,
                         data={"type": kind})]


# -- timeouts and crashes -----------------------------------------------------------------------------

TIMEOUT_DIRECTIONS = {
    "start": "the worker did not start in time: the machine is overloaded; retry",
    "load": "importing the candidate did not finish: module-level code must not loop or do heavy work; a "
            "load_inline build of big templates can take minutes (keep CUDA sources small, build once)",
    "init": "ModelNew's constructor did not finish: it must only build parameters (no loops over data, no "
            "benchmarking, no waiting)",
    "compile": "the first forward call (where kernels compile) did not return: either compilation is too slow "
               "(huge tl.static_range / unrolled loops, very large constexpr blocks, many autotune configs) or "
               "forward or a kernel never ends (a while loop whose condition does not change, a loop bound from "
               "the wrong argument)",
    "correctness": "forward returned once but a later call did not: a loop (host or kernel) that depends on the "
                   "data or on state kept between calls (counters, caches, sizes) never ends, or a launch grid far "
                   "larger than the input (the CPU interpreter runs every program one by one)",
    "guard": "the guard's extra runs (new data, moved inputs, outliers) did not finish: forward's running time "
             "depends on the data or on state kept between calls",
    "timing": "the candidate is too slow to time within the limit: it is far slower than the reference; look for "
              "launches inside Python loops, tiny blocks and host synchronisations",
}


def _loops(case: _Case) -> list[DiagnosticFinding]:
    if not case.source:
        return []
    try:
        tree = source_ast.parse(case.source)
    except SyntaxError:
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.While):
            out.append(case.finding(
                "timeout", f"a while loop at line {node.lineno}: check that it ends for every input",
                [f"condition: {ast.unparse(node.test)[:160]}"],
                "make the loop's condition change on every iteration (a step that can be 0, a size that never "
                "shrinks, state that persists between calls)", location=case.location(node.lineno), severity="info"))
    configs = len(re.findall(r"triton\.Config\(", case.source))
    if configs > 8:
        out.append(case.finding("timeout", f"{configs} autotune configs: each one compiles and is benchmarked on the "
                                "first call", [], "keep a handful of configs (or one on CPU)", location=None,
                                severity="info"))
    return sorted(out, key=lambda f: f.location.line if f.location else 0)[:3]


def _timeout(case: _Case) -> list[DiagnosticFinding]:
    evaluation = case.evaluation
    phase = evaluation.phase or "start"
    limit = (evaluation.settings or {}).get("timeout_s")
    after = f" after {limit:g} s" if isinstance(limit, (int, float)) else ""
    durations = ", ".join(f"{k[:-2]} {v:.1f} s" for k, v in (evaluation.durations_s or {}).items()
                          if k.endswith("_s") and k not in ("reference_s", "candidate_total_s")
                          and not k.startswith("parent_"))
    findings = [case.finding("timeout", f"timed out{after} in phase {phase}", [evaluation.message, durations],
                             TIMEOUT_DIRECTIONS.get(phase, "the candidate did not finish within the limit"),
                             location=None, data={"timeout_s": limit})]
    if phase in ("compile", "correctness", "guard", "load", "init"):
        findings += _loops(case)
    return findings


FAULTHANDLER_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<function>\S+)')
BOILERPLATE = ("Extension modules:", "Current thread", "Thread 0x", "Stack (most recent", "<no Python frame>")


def _crash(case: _Case) -> list[DiagnosticFinding]:
    e, evaluation = case.error, case.evaluation
    if e.get("out_of_memory_bytes"):  # ended by its memory guard: no traceback, the figure is the evidence
        used = e["out_of_memory_bytes"] / 1e9
        return [case.finding(
            "out-of-memory", f"out of host memory in phase {evaluation.phase}: {used:.1f} GB",
            [evaluation.message, f"memory guard: {e.get('memory_guard') or 'unknown'}"],
            "the worker's memory (the process, what it started, and its files) grew past its budget: allocate only "
            "the output the reference returns, keep nothing per call, fuse instead of materialising large "
            "intermediates, and check the size arithmetic (a product of the wrong dimensions, numel squared)",
            location=None, data={"used_bytes": e["out_of_memory_bytes"], "device": "host"})]
    signal, code, phase = e.get("signal"), e.get("returncode"), e.get("phase") or evaluation.phase
    tail = str(e.get("stderr_tail") or "")
    useful = [line.strip() for line in tail.splitlines()
              if line.strip() and not line.strip().startswith(BOILERPLATE) and not line.strip().startswith("File ")]
    fatal = next((line for line in useful if line.startswith("Fatal Python error")), None)
    last = useful[-1] if useful else None
    location = None
    start = tail.rfind("Fatal Python error")
    for found in FAULTHANDLER_FRAME.finditer(tail[max(start, 0):]):
        if case.path and found.group("file") == case.path:  # most recent call first: the deepest frame
            location = case.location(int(found.group("line")), function=found.group("function"))
            break
    died = f"killed by {signal}" if signal else f"exited with code {code}"
    directions = {
        "SIGSEGV": "the process touched memory it does not own. With Triton on CPU this is almost always a load or "
                   "store out of bounds (no mask, or wrong offsets: the interpreter dereferences the raw address); "
                   "in CUDA C++ or ctypes code, check indices and pointer arithmetic. Mask every access "
                   "(mask=offs < n) and check strides",
        "SIGBUS": "a misaligned or out-of-range memory access in native code: check pointer arithmetic and masks",
        "SIGABRT": "native code aborted: an uncaught C++ exception or failed check (TORCH_CHECK, assert) in an "
                   "extension, or the C library found the heap corrupted by an out-of-bounds write",
        "SIGKILL": "killed from outside, most likely by the operating system's out-of-memory killer: the process "
                   "grew past the machine's memory; allocate less",
        "SIGFPE": "an arithmetic trap in native code (integer division by zero): check divisors and sizes",
        "SIGILL": "an illegal instruction: a trap in native code or a library built for another CPU",
    }
    if signal:
        direction = directions.get(signal, f"the process died of {signal} in native code")
    else:
        direction = ("the process exited on its own (sys.exit, os._exit or a native exit()): a candidate must "
                     "return from forward, never end the process")
    evidence = [fatal, last if last != fatal else None, f"returncode {code}"]
    findings = [case.finding("crash", f"the worker process {died} in phase {phase}", evidence, direction,
                             location=location, data={"signal": signal, "returncode": code})]
    fault = _cuda_fault(tail)
    if fault:
        findings.append(case.finding("cuda-fault", f"CUDA fault ({fault}) before the crash", [_first_line(tail)],
                                     "mask every load and store; compute-sanitizer names the kernel",
                                     location=None, severity="warning", data={"fault": fault}))
    if signal in ("SIGSEGV", "SIGBUS", "SIGABRT") or fault:
        findings += case.lint_support(UNMASKED, "warning")
    return findings
