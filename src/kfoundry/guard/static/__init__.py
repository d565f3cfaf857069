"""Static guard: rules read from a candidate's source with ``ast``. Nothing is imported or run, so the
parent process can judge untrusted code without importing it (and without importing torch).

``check_source(source)`` returns one :class:`Finding` per violation (merged per rule and line), each
with a rule id from ``findings.RULES``, a message naming the evidence, the line and short evidence
strings. A file that does not parse gives no findings: that is the evaluator's ``compile_error``.

Which code each rule reads
--------------------------
* **Kernels** are functions decorated with ``@triton.jit`` (also under ``@triton.autotune(...)`` or
  ``@triton.heuristics(...)``, or ``@jit`` imported from triton). Their bodies are Triton code:
  no rule about PyTorch applies inside them. Everything else is **host code**.
* **The forward scope** is ``ModelNew.forward`` (and ``__call__`` if ModelNew defines one) and every
  function reachable from it by name, transitively: ``self.method(...)``, ``helper(...)``,
  ``Helper.method(...)``, ``Fn.apply(...)`` (an autograd Function: its ``forward``), calling an instance
  of a class defined in the candidate (its ``forward``/``__call__``), ``Block(...)`` (its ``__init__``),
  a function passed by name. Other methods of ModelNew are in the scope too, unless only
  ``__init__`` reaches them. ``ModelNew.__init__`` and what only it reaches are outside the scope:
  folding constants from parameters there with torch ops is legitimate.
  Rules on the forward scope: ``torch-compute``, ``nn-compute-layer``, ``stateful-forward``.
* ``try-except`` reads every host function (``__init__`` included); at module or class level only
  a ``try`` whose body holds more than imports and constant assignments is a finding.
* All other rules read the whole file: ``concurrency``, ``streams``, ``monkey-patch``,
  ``global-state``, ``dynamic-code``, ``introspection``, ``tensor-subclass``, ``io-network``,
  ``environment``, ``file-read`` (host code only: not inside kernels). ``streams``, ``library-compute``
  and ``cpp-system`` also read every string literal that looks like CUDA/C++ code or that reaches a
  ``load_inline`` source argument (through names, lists, ``+``, ``join``; docstrings and other bare
  string statements aside), with its comments and C++ string literals blanked out (raw strings
  ``R"d(...)d"`` included; ``1'000`` is a digit separator). A finding in C++ names the line of the
  candidate file where that code stands (escapes, line continuations and concatenated parts followed).

Files, devices and the system
-----------------------------
* ``file-read``: opening a file to read (``open``/``io.open``/``os.fdopen``... with a reading mode or a
  mode that is not a literal; an open whose mode writes stays ``io-network``), ``os.open`` without
  write flags, ``os.read``/``listdir``/``scandir``/``walk``/``stat``, ``glob``, ``numpy.fromfile``/
  ``load``/``memmap``, ``torch.load``/``from_file``, ``mmap``, ``linecache``, ``shutil`` copies and
  moves (also ``io-network``: they write), ``torch.utils.cpp_extension.load`` (sources on disk),
  standard input; ``read_text``/``read_bytes``/``iterdir``/``rglob``/``readlink`` on any receiver,
  ``open``/``glob``/``walk`` on a path or a receiver of unknown kind (not on tensors, the candidate's own
  objects or extensions); such names fetched with a literal ``getattr`` or named by a string literal;
  string literals that are /proc, /sys, /dev/ or /etc paths; compiler flags handed to ``load_inline``
  that read files or run programs (``@file``, ``-include``, ``-imacros``, ``-fplugin``, ``-B``).
  Imports alone are not findings.
* ``cpp-system`` (the CUDA/C++ sources): libc/POSIX calls that open, read or write files, start or
  inspect processes, open sockets, read or change the environment, load libraries or make raw system
  calls (``fopen``, ``open``, ``read``, ``stat``, ``system``, ``popen``, ``exec*``, ``fork``,
  ``socket``, ``connect``, ``getenv``, ``dlopen``, ``mmap``, ``ptrace``, ``syscall`` ...), as free
  calls (``read(`` or ``::read(``/``std::read(``; not ``p.read(``, ``p->read(``, ``Reader::read(``,
  ``std::bind(``, not the source's own definitions and declarations) or taken as values (``&popen``,
  in a ``#define``); ``environ``, ``FILE*``, ``std::ifstream``/``ofstream``/``fstream``,
  ``std::filesystem``, ``stdin``, socket and ``O_*`` constants, pybind11's ``module_::import``/``exec``
  and the Python C API; string literals naming /proc, /sys/, /dev/, /etc/, /tmp, home and cache
  folders, URLs or system-call instructions; ``#include`` of absolute paths; ``#embed``. Bodies of
  ``__device__``/``__global__`` functions are skipped only in sources that reach ``cuda_sources`` alone
  (nvcc cannot call libc there) and when the qualifiers are not defined away (``#define __device__``,
  ``-D__device__=``, itself a finding).

What counts as a tensor (torch-compute)
---------------------------------------
A small flow-insensitive type inference per function, iterated to a fixed point over the file:
tensors are ``forward``'s parameters (except ``self``, and those with a constant default or an
``int``/``float`` annotation), names assigned from torch calls that return tensors (allocations
included), from tensor methods (``x.view(...)``, ``x.contiguous()``), ``self.<sub>.weight``/``.bias``,
``self.<attr>`` that ``__init__`` set to an ``nn.Parameter``/a tensor or registered as a buffer,
results of a ``load_inline`` extension's functions, and helper parameters whose every call site
passes a tensor (or annotated ``torch.Tensor``). Integers and other non-tensors are ``.shape[...]``,
``.size()``, ``.stride()``, ``.numel()``, ``len()``, ``int()``, constants, ``triton.cdiv``/
``next_power_of_2``, ``math.*``, tuple-unpacked ``x.shape`` and arithmetic on those. A name that is
given different kinds in different places is *unknown*. Operators (arithmetic, unary, comparisons,
augmented assignment, indexing with a tensor) are findings only when an operand is known to be a tensor; methods are findings on a known tensor when not in ``TENSOR_METHODS``, and on
an unknown receiver only for unmistakable tensor-compute names (``sum``, ``exp``, ``matmul``, ...).
When unsure there is no finding: the dynamic guard judges what really ran.

Limits (what the static rules cannot see)
-----------------------------------------
Values that flow through containers (``ops = [torch.add]; ops[0](y, b)``), attributes of unknown
objects, parameters of functions nested in forward, or code outside the file; names fetched with
``getattr`` (even with a literal name: ``getattr(torch.cuda, "Stream")`` is deliberately left to the
dynamic guard, and ``tests/fixtures/guard/dyn_*`` rely on that); caches in module-level containers
written without a ``global`` statement; C++ tensor arithmetic written with operators (``a * b`` on
``torch::Tensor``); sources assembled at run time or read from files; compute done in NumPy on the
host; ``torch.cuda.*`` is never judged compute. The dynamic guard covers these. Paths assembled at
run time (``"/" + "proc"``) are not seen, but the calls that read them are; a C++ libc call hidden
behind token pasting is seen only as the pasting (``##`` in a ``#define``).

The package
-----------
``program`` (the file's definitions and names), ``kinds`` and ``torch_names`` (what the inference tracks and
what PyTorch names mean), ``inference`` and ``fixpoint`` (the kind of an expression; the whole-file fixed
point), ``scope`` (the forward scope), ``report`` (findings merged per rule and line), the rules:
``forward_rules``, ``host_rules``, ``file_rules``, and for C++ sources ``cpp_sources``, ``cpp_lex`` and
``cpp_scan``; ``analysis`` runs them in order.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import sys
import threading
from collections import OrderedDict

from kfoundry import source_ast

from ..findings import Finding
from .analysis import run

__all__ = ["check_source"]


def _run_deep(tree: ast.Module, source: str) -> list[Finding]:
    """run() for sources nested deeper than the recursion limit allows: in a thread with a big stack."""
    out: dict = {}

    def target():
        try:
            out["findings"] = run(tree, source)
        except BaseException as exc:  # handed to the caller
            out["error"] = exc

    old_limit, old_stack = sys.getrecursionlimit(), threading.stack_size()
    try:
        threading.stack_size(256 * 1024 * 1024)
        sys.setrecursionlimit(max(old_limit, 100_000))
        worker = threading.Thread(target=target, name="kfoundry-static-guard")
        worker.start()
        worker.join()
    finally:
        threading.stack_size(old_stack)
        sys.setrecursionlimit(old_limit)
    if "error" in out:
        raise out["error"]
    return out["findings"]


REMEMBERED = 64  # sources whose findings are kept: a composed candidate is checked by the composer, then judged


class _Remembered:
    """The findings of the last REMEMBERED sources checked, by the source's hash: the findings depend on the
    source alone (the file's name only labels a parse error, which gives none), and the composer's self-check and
    the evaluator's static guard read the same composed file, up to 2 s each for a network's (ResNet-18's on
    a 2-core machine), in the parent's one Python thread, between a search's proposals."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._findings: OrderedDict[str, list[Finding]] = OrderedDict()

    def get(self, key: str) -> list[Finding] | None:
        with self._lock:
            if key not in self._findings:
                return None
            self._findings.move_to_end(key)
            return copy.deepcopy(self._findings[key])  # a caller's edits never reach the next caller

    def put(self, key: str, findings: list[Finding]) -> None:
        with self._lock:
            self._findings[key] = copy.deepcopy(findings)
            while len(self._findings) > REMEMBERED:
                self._findings.popitem(last=False)


_remembered = _Remembered()


def check_source(source: str, filename: str = "<candidate>") -> list[Finding]:
    """Findings of the static rules on a candidate's source (empty when it does not parse)."""
    key = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()
    known = _remembered.get(key)
    if known is not None:
        return known
    findings = _check(source, filename)
    _remembered.put(key, findings)
    return findings


def _check(source: str, filename: str) -> list[Finding]:
    try:
        tree = source_ast.parse(source, filename=filename)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []  # the evaluator reports what does not compile
    try:
        return run(tree, source)
    except RecursionError:
        return _run_deep(tree, source)
