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
"""

from __future__ import annotations

import ast
import builtins as _py_builtins
import posixpath
import re
import sys
import threading
from dataclasses import dataclass, field

from .allowlist import NN_NONCOMPUTE_MODULES, TENSOR_METHODS, TORCH_FUNCTIONS
from .findings import RULES, Finding

__all__ = ["check_source"]

# ---------------------------------------------------------------------------------------------
# kinds: what the inference knows about a value
# ---------------------------------------------------------------------------------------------
BOT = "bot"  # nothing known yet (fixed-point start)
T = "tensor"
S = "scalar"  # clearly not a tensor: numbers, strings, None, shapes, dtypes, streams ...
U = "unknown"
# tuples: ("tuple", kinds) a tuple/list literal; ("nn", Layer) an nn module whose call computes;
# ("nnlist", Layer) a container of such; ("self"|"inst"|"cls"|"super", Class); ("func", key);
# ("method", Class, name, bound); ("apply", Class); ("alias", qualname) an imported name;
# ("kernel", name); ("ext",) a load_inline extension; ("extfn",) one of its functions; ("builtin", name)

_BUILTINS = frozenset(dir(_py_builtins))


def _join(a, b):
    if a == BOT:
        return b
    if b == BOT:
        return a
    if a == b:
        return a
    if (isinstance(a, tuple) and isinstance(b, tuple) and a[0] == b[0] == "tuple"
            and len(a[1]) == len(b[1])):
        return ("tuple", tuple(_join(x, y) for x, y in zip(a[1], b[1])))
    return U


def _nontensor(k) -> bool:
    return k == S or isinstance(k, tuple)


def _elem(k):
    """Kind of the elements got by unpacking, iterating or indexing a value of kind k."""
    if k in (T, S, BOT):
        return k
    if isinstance(k, tuple):
        if k[0] == "tuple":
            out = BOT
            for e in k[1]:
                out = _join(out, e)
            return U if out == BOT else out
        if k[0] == "nnlist":
            return ("nn", k[1])
        if k[0] == "nn" and k[1] == "Sequential":
            return ("nn", "Sequential")
    return U


# ---------------------------------------------------------------------------------------------
# what PyTorch names mean
# ---------------------------------------------------------------------------------------------
_TENSOR_SCALAR_ATTRS = frozenset({
    "shape", "dtype", "device", "ndim", "is_cuda", "layout", "requires_grad", "is_leaf", "itemsize",
    "nbytes", "names", "is_sparse", "is_quantized", "is_meta", "grad_fn", "is_nested", "output_nr",
})
_TENSOR_VIEW_ATTRS = frozenset({"T", "mT", "H", "mH", "data", "real", "imag", "grad"})
# tensor methods whose result is not a tensor
_TENSOR_QUERY_METHODS = frozenset({
    "size", "stride", "dim", "ndimension", "numel", "nelement", "element_size", "storage_offset",
    "data_ptr", "is_contiguous", "is_floating_point", "is_complex", "get_device", "item", "tolist",
    "is_pinned", "is_shared", "untyped_storage", "storage", "dim_order", "is_same_size", "is_set_to",
    "is_inference", "is_meta", "is_sparse", "is_quantized",
})
# methods that only tensors have: on an unknown receiver they make a tensor
_TENSOR_ONLY_METHODS = frozenset({
    "contiguous", "view", "view_as", "expand", "expand_as", "permute", "unsqueeze", "new_empty",
    "new_zeros", "new_ones", "new_full", "new_empty_strided", "reshape_as", "narrow", "clone", "detach",
    "type_as",
})
# unmistakable tensor compute: a finding even when the receiver's kind is unknown
_LIKELY_TENSOR_COMPUTE = frozenset({
    "sum", "mean", "exp", "exp_", "exp2", "log_softmax", "softmax", "matmul", "mm", "bmm", "addmm",
    "addmm_", "baddbmm", "baddbmm_", "addbmm", "mv", "addmv", "relu", "relu_", "gelu", "silu", "sigmoid",
    "sigmoid_", "tanh", "tanh_", "clamp", "clamp_", "clamp_min", "clamp_max", "clip", "clip_", "sqrt",
    "sqrt_", "rsqrt", "rsqrt_", "pow", "pow_", "mul", "mul_", "add_", "sub_", "div", "div_", "neg",
    "neg_", "abs", "abs_", "amax", "amin", "argmax", "argmin", "max", "min", "var", "std", "norm", "prod",
    "cumsum", "cumprod", "logsumexp", "masked_fill", "masked_fill_", "where", "topk", "addcmul",
    "addcmul_", "addcdiv", "lerp", "lerp_", "einsum", "softplus", "erf", "erf_", "reciprocal", "square",
    "outer", "dot", "log1p", "expm1", "log2", "log10", "sin", "cos", "floor", "ceil", "trunc", "sign",
    "maximum", "minimum", "fmod", "remainder", "logical_and", "logical_or", "logical_not", "index_select",
    "gather", "scatter", "scatter_", "scatter_add", "scatter_add_", "index_add", "index_add_",
    "masked_select", "nonzero", "triu", "tril", "flip", "roll", "repeat_interleave", "hardtanh",
    "leaky_relu", "elu", "selu", "mish", "hardswish", "hardsigmoid", "logit", "nan_to_num",
    "count_nonzero", "allclose", "isclose", "normal_", "uniform_", "bernoulli", "bernoulli_",
    "__matmul__", "__rmatmul__", "__add__", "__radd__", "__iadd__", "__mul__", "__rmul__", "__imul__",
    "__sub__", "__rsub__", "__isub__", "__truediv__", "__rtruediv__", "__itruediv__", "__floordiv__",
    "__mod__", "__pow__", "__rpow__", "__neg__", "__abs__", "__and__", "__or__", "__xor__", "__invert__",
})
_DUNDER_COMPUTE = frozenset(m for m in _LIKELY_TENSOR_COMPUTE if m.startswith("__")) | {
    "__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__", "__getitem__", "__setitem__",
}
_NN_CALL_METHODS = frozenset({"forward", "__call__", "_call_impl", "_conv_forward", "_wrapped_call_impl"})
_STREAM_METHODS = frozenset({"wait_stream", "record_stream", "wait_event", "record_event"})
_MUTATORS = frozenset({"append", "extend", "insert", "update", "setdefault", "add", "__setitem__",
                       "put", "appendleft", "extendleft"})

# torch.<name> that other rules judge (global-state, io-network) or that only read (torch.load)
_DELEGATED_TOP = frozenset({"save", "load", "manual_seed", "seed", "use_deterministic_algorithms"})
# torch.<name>(...) whose result is not a tensor
_TORCH_QUERY_FUNCS = frozenset({
    "is_tensor", "is_floating_point", "is_complex", "numel", "result_type", "promote_types", "can_cast",
    "finfo", "iinfo", "device", "dtype", "Size", "get_default_dtype", "broadcast_shapes", "no_grad",
    "inference_mode", "enable_grad", "is_grad_enabled", "set_grad_enabled", "is_inference_mode_enabled",
    "autocast", "get_device", "get_default_device", "get_num_threads", "get_num_interop_threads",
    "get_float32_matmul_precision", "are_deterministic_algorithms_enabled", "get_rng_state", "initial_seed",
    "typename", "is_storage", "compiled_with_cxx11_abi", "sym_int", "sym_float", "sym_max", "sym_min",
    "sym_not",
}) | _DELEGATED_TOP
_COMPUTE_PREFIXES = (
    "torch.nn.functional.", "torch.functional.", "torch.linalg.", "torch.special.", "torch.fft.",
    "torch.sparse.", "torch.nested.", "torch.masked.", "torch.ops.aten.", "torch.ops.prims.",
    "torch._C._nn.", "torch._C._VariableFunctions.", "torch._C._linalg.", "torch._C._special.",
    "torch._C._fft.", "torch._refs.", "torch._prims.", "torch._decomp.", "torch.nn.init.", "torch.func.",
    "torch._ops.ops.aten.",
)
_TORCH_COMPUTE_EXACT = frozenset({"torch.compile", "torch.vmap"})
# modules whose calls give plain Python values
_SCALAR_MODULES = frozenset({
    "math", "cmath", "triton", "operator", "random", "os", "sys", "time", "functools", "itertools",
    "collections", "typing", "dataclasses", "enum", "string", "re", "json", "struct", "warnings",
    "logging", "numbers", "fractions", "decimal", "builtins",
})

_STREAM_QUALS = frozenset({
    "torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.Event", "torch.cuda.set_stream",
    "torch.cuda.ExternalStream", "torch.cuda.StreamContext", "torch.Stream", "torch.Event",
    "torch.cuda.streams.Stream", "torch.cuda.streams.Event", "torch.cuda.streams.ExternalStream",
})
_GLOBAL_STATE_EXACT = frozenset({
    "torch.use_deterministic_algorithms", "torch.manual_seed", "torch.seed", "torch.cuda.manual_seed",
    "torch.cuda.manual_seed_all", "torch.cuda.seed", "torch.cuda.seed_all", "torch.random.manual_seed",
    "torch.random.seed", "torch.random.set_rng_state", "torch.random.fork_rng",
})
_GLOBAL_STATE_STORE_PREFIXES = ("torch.backends.", "torch._dynamo.config.", "torch._inductor.config.",
                                "torch._functorch.config.", "torch._C.")
_BACKEND_QUERIES = frozenset({"is_available", "is_built", "version", "is_enabled", "preferred_linalg_library"})

_SYS_INTROSPECTION = frozenset({
    "sys.modules", "sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile",
    "sys.meta_path", "sys.path_hooks", "sys.addaudithook", "sys.gettrace", "sys.getprofile",
})
_INTROSPECTION_ATTRS = frozenset({
    "__globals__", "__code__", "__closure__", "f_back", "f_globals", "f_locals", "__subclasses__",
    "tb_frame", "gi_frame", "__builtins__",
})
_INTROSPECTION_MODULES = frozenset({"gc", "inspect", "builtins", "__builtin__", "importlib", "ctypes",
                                    "_ctypes", "cffi"})
_CONCURRENCY_MODULES = frozenset({"threading", "_thread", "multiprocessing", "concurrent", "asyncio"})
_NETWORK_MODULES = frozenset({
    "socket", "subprocess", "requests", "urllib", "urllib3", "http", "httpx", "aiohttp", "ftplib",
    "smtplib", "telnetlib", "paramiko", "websocket", "websockets", "pty", "xmlrpc", "webbrowser", "pycurl",
})
_IO_CALLS = frozenset({
    "torch.save", "numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.savetxt", "pickle.dump",
    "marshal.dump", "os.system", "os.popen", "os.fork", "os.forkpty", "os.remove", "os.unlink",
    "os.rename", "os.renames", "os.replace", "os.rmdir", "os.removedirs", "os.truncate", "os.write",
    "os.startfile",
})
_IO_PREFIXES = ("os.exec", "os.spawn", "os.posix_spawn", "subprocess.", "socket.", "requests.",
                "urllib.", "http.", "httpx.", "aiohttp.")
_SHUTIL_READ_ONLY = frozenset({"which", "disk_usage", "get_terminal_size"})
# what to do instead, said in the finding's own message (the newer rules' messages carry it)
_INSTEAD = {
    "file-read": " (instead: read nothing from disk; take every input from forward's arguments and the constructor)",
    "cpp-system": " (instead: let the extension only compute; no libc I/O, processes, sockets or environment)",
}
# file-read: calls (by qualname) that read files, list folders or map them into memory
_OPENERS = frozenset({  # open-like: the mode (second argument or mode=) says read or write
    "builtins.open", "io.open", "os.fdopen", "codecs.open", "gzip.open", "bz2.open", "lzma.open", "tarfile.open",
    "zipfile.ZipFile", "tokenize.open", "io.FileIO", "io.open_code",
})
_READ_CALLS = frozenset({
    "os.read", "os.pread", "os.readv", "os.preadv", "os.listdir", "os.scandir", "os.walk", "os.fwalk",
    "os.readlink", "os.stat", "os.lstat", "os.statvfs", "os.listxattr", "os.getxattr", "os.sendfile",
    "glob.glob", "glob.iglob", "glob.glob0", "glob.glob1", "numpy.fromfile", "numpy.load", "numpy.loadtxt",
    "numpy.genfromtxt", "numpy.memmap", "numpy.fromregex", "numpy.lib.format.open_memmap", "torch.load",
    "torch.from_file", "torch.serialization.load", "torch.jit.load", "mmap.mmap", "pickle.load", "marshal.load",
    "json.load", "PIL.Image.open", "pkgutil.get_data", "sqlite3.connect", "filecmp.cmp", "filecmp.dircmp",
    "h5py.File", "safetensors.torch.load_file", "safetensors.safe_open", "torch.utils.cpp_extension.load",
    "torch.ops.load_library", "torch.classes.load_library",
})
_READ_PREFIXES = ("linecache.", "fileinput.", "pandas.read_", "torch.hub.")
_SHUTIL_READS = frozenset({"copy", "copy2", "copyfile", "copytree", "move", "copyfileobj", "copymode", "copystat",
                           "make_archive", "unpack_archive"})
# methods that read the file system on any receiver (pathlib.Path's and their likes)
_PATH_READ_METHODS = frozenset({"read_text", "read_bytes", "iterdir", "rglob", "readlink", "from_file"})
# methods that read the file system on a path (and on a receiver the analysis knows nothing about)
_PATH_MAYBE_METHODS = frozenset({"open", "glob", "walk"})
# string constants naming a file-reading function: fetched by name (getattr(p, "read_bytes"))
_READ_NAMES = frozenset(_PATH_READ_METHODS | {"listdir", "scandir", "fromfile", "iterdir"})
_PATHLIB_CLASSES = frozenset({"pathlib.Path", "pathlib.PurePath", "pathlib.PosixPath", "pathlib.PurePosixPath",
                              "pathlib.WindowsPath", "pathlib.PureWindowsPath"})
# what derives a path from a path
_PATH_DERIVING = frozenset({"parent", "parents", "joinpath", "with_name", "with_suffix", "with_stem", "resolve",
                            "absolute", "expanduser", "readlink", "home", "cwd", "relative_to"})
# absolute paths that are the system's (after normalizing "/./", "//")
_SYSTEM_PATH_RX = re.compile(r"^/(?:proc|sys|etc)(?:/|$)|^/dev/")
_OS_OPEN_WRITE_FLAGS = frozenset({"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC", "O_TMPFILE", "O_EXCL"})
# compiler flags handed to load_inline/load that read files or run programs
_FLAG_READ_RX = re.compile(r"^(?:@|-include|--pre-include|-imacros|-fplugin|-wrapper|--?specs|-B\s*[/.~])|,@")
_EXTENSION_FLAG_ARGS = frozenset({"extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths",
                                  "extra_sycl_cflags"})
_DYNAMIC_CALLS = frozenset({
    "builtins.eval", "builtins.exec", "builtins.compile", "builtins.__import__", "types.FunctionType",
    "types.CodeType", "types.LambdaType", "marshal.loads",
})
_SUBCLASS_NAMES = frozenset({"_make_subclass", "_make_wrapper_subclass", "as_subclass", "__torch_function__",
                             "__torch_dispatch__", "TorchDispatchMode", "TorchFunctionMode"})


def _nn_layer(qn: str | None) -> str | None:
    """'torch.nn.Linear' / 'torch.nn.modules.linear.Linear' -> 'Linear' (classes under torch.nn)."""
    if not qn or not qn.startswith("torch.nn."):
        return None
    parts = qn.split(".")
    if parts[2] in ("functional", "init", "utils", "parameter", "Parameter", "Buffer", "attention"):
        return None
    last = parts[-1]
    return last if last[:1].isupper() else None


def _torch_compute(qn: str) -> bool:
    """Does calling this torch qualname compute (as opposed to allocate, view, query, configure)?"""
    parts = qn.split(".")
    if parts[0] != "torch" or len(parts) < 2:
        return False
    if qn.startswith("torch.Tensor.") and len(parts) == 3:
        m = parts[2]
        if m.startswith("__") and m.endswith("__"):
            return m in _DUNDER_COMPUTE
        return m not in TENSOR_METHODS
    if qn in _TORCH_COMPUTE_EXACT or qn.startswith(_COMPUTE_PREFIXES):
        return True
    if len(parts) == 2:
        name = parts[1]
        if name in TORCH_FUNCTIONS or name in _DELEGATED_TOP or name[:1].isupper():
            return False
        if name.startswith(("set_", "_set")):
            return False  # global-state's business
        return True
    return False


# ---------------------------------------------------------------------------------------------
# CUDA / C++ source strings
# ---------------------------------------------------------------------------------------------
_CPP_MARKERS = re.compile(
    r"__global__|__device__|#\s*include|\b(?:torch|at|c10)::|<<<|PYBIND11_MODULE|TORCH_LIBRARY|"
    r"\bcu(?:blas|dnn|fft|sparse|solver)[A-Z]\w*\s*\(|\bcutlass::|\bcudaStream|\bcudaEvent")
_CPP_STREAMS = re.compile(
    r"\b(cudaStreamCreate\w*|cudaEventRecord\w*|cudaStreamWaitEvent|getStreamFromPool|\w*CUDAStreamGuard"
    r"|setCurrentCUDAStream)\b")
_CPP_LIBRARY = re.compile(r"(?i)\b(cublas\w*|cudnn\w*|cufft\w*|cusparse\w*|cusolver\w*|cutlass\b(?:::\w+)*)")
_CPP_THRUST = re.compile(
    r"\b(thrust::(?:transform|reduce|sort|sort_by_key|stable_sort|inclusive_scan|exclusive_scan|"
    r"transform_reduce|inner_product|count|copy_if|reduce_by_key)|cub::Device\w+)\b")
_CPP_INCLUDE = re.compile(r"#\s*include\s*[<\"]([^>\"\n]+)[>\"]")
_CPP_NS_CALL = re.compile(r"\b(at|torch)::((?:\w+::)*)(\w+)\s*(?:<[^<>;{}()]*>\s*)?\(")
_CPP_METHOD = re.compile(
    r"\.\s*(matmul|mm|bmm|addmm_?|baddbmm|conv[123]d|conv_transpose[123]d|linear|relu_?|gelu|silu|sigmoid|"
    r"tanh|softmax|log_softmax|sum|mean|exp|log|sqrt|rsqrt|pow|add_?|sub_?|mul_?|div_?|clamp_?|"
    r"clamp_min|clamp_max|max|min|amax|amin|argmax|argmin|norm|var|std|cumsum|prod|layer_norm|"
    r"batch_norm|group_norm|einsum|masked_fill_?|where|topk|index_select|gather|scatter_add|neg|abs|"
    r"erf|maximum|minimum)\s*\(")
_CPP_OK_NAMES = frozenset({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "arange", "from_blob", "tensor", "scalar_tensor", "dtype", "device", "device_of", "elementSize",
    "toString", "typeMetaToScalarType", "isFloatingType", "isComplexType", "isIntegralType",
    "globalContext", "get_default_dtype", "requires_grad", "layout", "memory_format", "is_grad_enabled",
    "ceil_div", "maybe_wrap_dim", "get_num_threads", "numel", "parallel_for",
})
# checks and queries: checkAllSameGPU, check_dim_size, assert_no_overlap, isFloatingType, getCurrentX ...
_CPP_OK_NAME_RX = re.compile(r"(?:check|assert|get)(?:[A-Z_]|$)|(?:is|has)[A-Z]")
# function definitions in the source (`__device__ void add(float v) { ... }`)
_CPP_DEFINED = re.compile(r"\b([A-Za-z_]\w*)\s*\([^;{}()]*(?:\([^;{}()]*\)[^;{}()]*)*\)\s*(?:const\s*)?"
                          r"(?:noexcept\s*)?(?:->\s*[\w:<>]+\s*)?\{")
_CPP_COMPUTE_NS = frozenset({"native", "linalg", "fft", "special", "nn", "functional", "blas", "sparse",
                             "_ops", "cudnn", "miopen"})
_CPP_OK_NS = frozenset({"cuda", "indexing", "detail", "autograd", "jit", "cpu", "mps", "xpu"})


def _blank_cpp(code: str) -> tuple[str, str]:
    """(code with comments blanked, code with comments and string/char literals blanked); newlines kept."""
    no_comments, plain, _ = _scan_cpp(code)
    return no_comments, plain


def _raw_string_start(code: str, i: int) -> bool:
    """Does the quote at code[i] open a C++ raw string (R"d(...)d", u8R"(...)", LR"(...)")?"""
    if i < 1 or code[i - 1] != "R":
        return False
    k = i - 1
    if code[k - 2: k] == "u8":
        k -= 2
    elif k >= 1 and code[k - 1] in "uUL":
        k -= 1
    return k == 0 or not (code[k - 1].isalnum() or code[k - 1] == "_")


def _scan_cpp(code: str) -> tuple[str, str, list[tuple[int, int]]]:
    """(code with comments blanked, code with comments and string/char literals blanked, the literals'
    (start, end) spans, quotes included); newlines kept, so positions agree across the three.
    Raw strings (R"d(...)d") are literals to their closing delimiter, over lines; a quote after a digit
    (1'000'000) is a digit separator."""
    no_comments = []
    no_strings = []
    literals = []
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if code.startswith("//", i):
            j = code.find("\n", i)
            j = n if j < 0 else j
            blank = " " * (j - i)
            no_comments.append(blank)
            no_strings.append(blank)
            i = j
        elif code.startswith("/*", i):
            j = code.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank = re.sub(r"[^\n]", " ", code[i:j])
            no_comments.append(blank)
            no_strings.append(blank)
            i = j
        elif c == '"' and _raw_string_start(code, i):
            paren = code.find("(", i + 1, i + 18)
            delim = code[i + 1: paren] if paren >= 0 else None
            if delim is None or re.search(r"[\s\\)]", delim):
                end = code.find("\n", i)  # not a well-formed raw string: up to the line's end
                j = n if end < 0 else end
            else:
                close = code.find(")" + delim + '"', paren + 1)
                j = n if close < 0 else close + len(delim) + 2
            no_comments.append(code[i:j])
            no_strings.append('"' + re.sub(r"[^\n]", " ", code[i + 1: j - 1]) + ('"' if j - i >= 2 else ""))
            literals.append((i, j))
            i = j
        elif c == "'" and i > 0 and _CPP_DIGITS_BEFORE.search(code, max(0, i - 64), i):
            no_comments.append(c)  # a digit separator
            no_strings.append(c)
            i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and code[j] != c and code[j] != "\n":
                j += 2 if code[j] == "\\" else 1
            j = min(j + 1, n)
            no_comments.append(code[i:j])
            no_strings.append(c + " " * max(0, j - i - 2) + (c if j - i >= 2 else ""))
            literals.append((i, j))
            i = j
        else:
            no_comments.append(c)
            no_strings.append(c)
            i += 1
    return "".join(no_comments), "".join(no_strings), literals


_CPP_DIGITS_BEFORE = re.compile(r"(?<![\w.'])\.?\d[\w.']*$")  # a number literal runs up to the quote
_PY_STRING_START = re.compile(r"""([rRbBuUfF]{0,2})('''|\"\"\"|'|")""")


def _string_line_map(segment: str, first_line: int, value: str) -> list[int] | None:
    """The source line of every character of a str constant's value, read from the constant's source text
    (escapes, line continuations and implicitly concatenated parts followed); None when the text cannot
    be followed (f-strings, bytes, anything that does not decode to the value)."""
    out: list[int] = []
    i, n, line = 0, len(segment), first_line
    while i < n:
        ch = segment[i]
        if ch in " \t\f()":
            i += 1
        elif ch == "\n":
            line, i = line + 1, i + 1
        elif ch == "\r":
            i += 2 if segment.startswith("\r\n", i) else 1
            line += 1
        elif ch == "\\" and segment[i + 1: i + 2] in ("\n", "\r"):
            i += 3 if segment.startswith("\r\n", i + 1) else 2
            line += 1
        elif ch == "#":
            j = segment.find("\n", i)
            i = n if j < 0 else j
        else:
            m = _PY_STRING_START.match(segment, i)
            if not m or set(m.group(1).lower()) & set("fb"):
                return None
            raw, q = "r" in m.group(1).lower(), m.group(2)
            i = m.end()
            while True:
                if i >= n:
                    return None
                if segment.startswith(q, i):
                    i += len(q)
                    break
                c = segment[i]
                if c == "\r":
                    i += 1
                    continue  # \r\n in the file is one \n in the value
                if c == "\\" and not raw:
                    nxt = segment[i + 1: i + 2]
                    if nxt in ("\n", "\r"):
                        i += 3 if segment.startswith("\r\n", i + 1) else 2
                        line += 1
                        continue
                    width = {"x": 4, "u": 6, "U": 10}.get(nxt, 2)
                    if nxt == "N":
                        close = segment.find("}", i)
                        width = (close + 1 - i) if close > 0 else 2
                    elif nxt and nxt in "01234567":
                        while width < 4 and segment[i + width: i + width + 1] in tuple("01234567"):
                            width += 1
                    elif nxt not in tuple("\\'\"abfnrtvxuU"):
                        out.append(line)  # an unknown escape keeps its backslash
                    out.append(line)
                    i += width
                    continue
                if c == "\\" and raw:  # kept, and the next character cannot end the string
                    out.append(line)
                    i += 1
                    c = segment[i: i + 1]
                    if not c:
                        return None
                out.append(line)
                if c == "\n":
                    line += 1
                i += 1
    return out if len(out) == len(value) else None


# cpp-system: libc/POSIX calls in C/C++ host code. A call is `name(`, `::name(` or `std::name(`; not a
# member's (`.read(`, `->read(`) nor another namespace's (`Foo::read(`), and not the source's own
# definition or declaration of the name. Code inside __device__/__global__ functions of a source that
# only nvcc compiles cannot call libc: it is not read there.
_CPP_SYSTEM_CALLS: dict[str, str] = {}
for _what, _names in (
        ("opens, reads or writes files", "fopen fopen64 freopen fdopen open open64 openat openat2 creat read pread "
         "pread64 readv preadv write pwrite pwrite64 writev fread fwrite fgets fscanf fseek ftell opendir fdopendir "
         "readdir readdir64 scandir nftw ftw stat stat64 lstat fstat fstatat statx access faccessat readlink "
         "readlinkat realpath unlink unlinkat rename renameat mkdir rmdir chmod chown truncate ftruncate tmpfile "
         "tmpnam mkstemp mkdtemp mmap mmap64 sendfile ioctl shm_open mkfifo chdir symlink copy_file_range "
         "splice inotify_init"),
        ("starts or inspects processes", "system popen pclose execl execlp execle execv execvp execvpe execve fexecve "
         "fork vfork clone clone3 posix_spawn posix_spawnp ptrace kill getppid prctl syscall waitpid process_vm_readv "
         "setsid setpgid daemon pipe pipe2 dup dup2"),
        ("opens sockets", "socket socketpair connect bind listen accept accept4 send recv sendto recvfrom sendmsg "
         "recvmsg getaddrinfo gethostbyname inet_pton inet_addr"),
        ("reads or changes the environment", "getenv secure_getenv setenv putenv unsetenv clearenv"),
        ("loads libraries", "dlopen dlmopen dlsym dlvsym")):
    for _name in _names.split():
        _CPP_SYSTEM_CALLS[_name] = _what
_CPP_STD_OK = frozenset({"bind", "remove", "move"})  # std::bind is <functional>'s, not a socket's
_CPP_SYSTEM_ALT = "|".join(sorted(_CPP_SYSTEM_CALLS, key=len, reverse=True))
_CPP_SYSTEM_CALL_RX = re.compile(r"\b(" + _CPP_SYSTEM_ALT + r")\s*\(")
_CPP_SYSTEM_NAME_RX = re.compile(r"\b(" + _CPP_SYSTEM_ALT + r")\b")
# a variable or parameter of the source's own with a libc name (`int read = 0`, `(const float* write,`)
_CPP_DECLARED_RX = re.compile(r"\b([A-Za-z_]\w*)(?:\s+|\s*[*&]+\s*)(" + _CPP_SYSTEM_ALT + r")\s*(?=[=;,)\[{:])")
_CPP_KEYWORDS = frozenset({"return", "else", "case", "throw", "do", "co_return", "co_yield", "co_await", "sizeof",
                           "new", "delete", "not", "and", "or", "goto", "typeid", "decltype", "alignof", "noexcept"})
# a libc function taken as a value (`auto f = &fopen;`, `g(popen, ...)`, `#define OPEN fopen`)
_CPP_SYSTEM_VALUE_RX = re.compile(r"(?:[&=(,]|\breturn)\s*(?:(?:std)?\s*::\s*)?\b(" + _CPP_SYSTEM_ALT + r")\b\s*[;,)]")
_CPP_DEFINE_RX = re.compile(r"#\s*define\b(?:[^\n\\]|\\.|\\\n)*")
# wherever they stand (outside device functions), these are findings
_CPP_SYSTEM_TOKENS = [(re.compile(rx), what) for rx, what in (
    (r"(?<![.>:\w])(?:::\s*)?(?:__)?environ\b", "reads the environment"),
    (r"\bFILE\s*\*", "handles a FILE*: file I/O"),
    (r"\b(?:std\s*::\s*)?(?:basic_)?(?:[io]?fstream|filebuf)\b", "opens a file stream"),
    (r"\bstd\s*::\s*(?:experimental\s*::\s*)?filesystem\b", "uses the file system"),
    (r"\bstd\s*::\s*cin\b|\bstdin\b", "reads standard input"),
    (r"\b(?:SYS|__NR)_\w+", "makes a raw system call"),
    (r"\b(?:AF_INET6?|AF_UNIX|AF_NETLINK|SOCK_STREAM|SOCK_DGRAM|sockaddr(?:_in6?|_un)?)\b", "opens sockets"),
    (r"\bO_(?:RDONLY|WRONLY|RDWR|CREAT|APPEND|TRUNC|DIRECTORY|PATH|TMPFILE)\b", "opens files"),
    (r"\bRTLD_\w+", "loads libraries"),
    (r"\b(?:py|pybind11)\s*::\s*(?:module_?\s*::\s*import|exec|eval|eval_file)\b"
     r"|\bPy(?:Import|Run|Eval|OS|Sys|File)_\w+",
     "calls into Python (modules, code strings), which can do anything"),
    (r"\bc10\s*::\s*utils\s*::\s*(?:get_env|set_env|has_env|check_env)\b", "reads or changes the environment"),
    (r"#\s*embed\b", "embeds a file at compile time"),
    (r"#\s*(?:define|undef)\s+__(?:device|global|host)__\b", "defines CUDA's function qualifiers away"),
    (r"#\s*define\b[^\n]*##", "pastes tokens in a macro (it can build a libc name)"),
)]
# inside the source's string literals: system and home paths, URLs, system-call instructions (inline asm)
_CPP_LITERAL_RX = re.compile(r"/proc|/sys/|/dev/|/etc/|/tmp|/\.cache|/home/|/root\b|/var/|/run/|~/|https?://|"
                             r"\bsyscall\b|\bsysenter\b|\bint\s+\$?0x80\b|\.incbin\b")
# CUDA's function qualifiers defined away (in the source or by a compiler flag)
_CPP_QUALIFIER_REDEFINED = re.compile(r"#\s*(?:define|undef)\s+__(?:device|global|host)__\b"
                                      r"|-[DU]\s*__(?:device|global|host)__")
_CPP_QUALIFIERS_BEFORE = re.compile(r"^[\w\s:<>,*&]*$")


def _cpp_device_spans(plain: str) -> list[tuple[int, int]]:
    """(start, end) of the bodies of the source's __device__/__global__ functions (not __host__ ones)."""
    spans = []
    for m in _CPP_DEFINED.finditer(plain):
        start = max(plain.rfind(c, 0, m.start()) for c in ";{}")
        quals = "\n".join(line for line in plain[start + 1: m.start()].split("\n")
                          if not line.lstrip().startswith("#"))
        if (not re.search(r"\b__(?:device|global)__\b", quals) or "__host__" in quals
                or not _CPP_QUALIFIERS_BEFORE.match(quals)):
            continue
        depth, j = 0, m.end() - 1
        while j < len(plain):
            if plain[j] == "{":
                depth += 1
            elif plain[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        spans.append((m.end() - 1, j + 1))
    return spans


# a word before `name(` that makes it a declaration (`ssize_t read(int, void*, size_t);`)
_CPP_TYPE_WORDS = frozenset({
    "void", "int", "long", "short", "char", "float", "double", "bool", "auto", "unsigned", "signed", "size_t",
    "ssize_t", "int64_t", "int32_t", "uint64_t", "uint32_t", "Tensor", "__device__", "__host__", "__global__",
    "__forceinline__", "inline", "static", "constexpr",
})


# ---------------------------------------------------------------------------------------------
# the analysis
# ---------------------------------------------------------------------------------------------
@dataclass(eq=False)
class _Func:
    node: ast.FunctionDef | ast.AsyncFunctionDef
    cls: str | None
    kernel: bool
    static: bool = False
    classmeth: bool = False
    prop: bool = False
    entry: bool = False  # ModelNew.forward: its parameters are the problem's inputs
    env: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)  # kinds seen at call sites
    ret: object = BOT
    bindings: list = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def display(self) -> str:
        return f"{self.cls}.{self.node.name}" if self.cls else f"{self.node.name}()"

    @property
    def self_name(self) -> str | None:
        if self.cls is None or self.static:
            return None
        args = self.node.args.posonlyargs + self.node.args.args
        return args[0].arg if args else None


@dataclass
class _Ctx:
    env: dict
    func: _Func | None

    @property
    def cls(self) -> str | None:
        return self.func.cls if self.func else None


def _str_const(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _flatten_targets(targets):
    for t in targets:
        if isinstance(t, (ast.Tuple, ast.List)):
            yield from _flatten_targets(t.elts)
        elif isinstance(t, ast.Starred):
            yield from _flatten_targets([t.value])
        else:
            yield t


def _chain_root(node):
    """The Name (or Call) at the bottom of an a.b[c].d chain."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node


def _module_level(body):
    """Statements at module (or class) level, looking into if/try/with/for blocks but not into defs."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)):
            yield from _module_level(stmt.body)
            yield from _module_level(getattr(stmt, "orelse", []))
        elif isinstance(stmt, (ast.Try, ast.TryStar)):
            yield from _module_level(stmt.body)
            for h in stmt.handlers:
                yield from _module_level(h.body)
            yield from _module_level(stmt.orelse)
            yield from _module_level(stmt.finalbody)


class _Analyzer:
    def __init__(self, tree: ast.Module, source: str):
        self.tree = tree
        self.source = source
        self.findings: dict[tuple[str, int], Finding] = {}
        self._lines: list[str] | None = None
        self._memo: dict | None = None  # switched on after solve(): envs no longer change
        self.parents: dict[ast.AST, ast.AST] = {}
        for p in ast.walk(tree):
            for c in ast.iter_child_nodes(p):
                self.parents[c] = p
        self.aliases: dict[str, str] = {}
        self.module_env: dict = {}
        self.classes: dict[str, ast.ClassDef] = {}
        self.methods: dict[str, dict[str, _Func]] = {}
        self.funcs: dict[tuple[str, str], _Func] = {}
        self.class_attrs: dict[str, dict[str, object]] = {}
        self.containers: dict[str, dict[str, str]] = {}
        self._kernel_cache: dict[ast.AST, bool] = {}
        self._func_of: dict | None = None
        self._ext_sources: dict[int, set[str]] = {}
        self._in_fstring: set = set()
        self._device_redefined = False
        self._collect_imports()
        self._collect_defs()
        fwd = self.method("ModelNew", "forward") if "ModelNew" in self.classes else None
        if fwd is not None:
            fwd.entry = True
        self.module_bindings = self._bindings_of(None)
        for f in self.funcs.values():
            if not f.kernel:
                f.bindings = self._bindings_of(f)

    # -- names --------------------------------------------------------------------------------
    def _collect_imports(self):
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = a.name
                    else:
                        root = a.name.split(".")[0]
                        self.aliases[root] = root
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                for a in node.names:
                    if a.name != "*":
                        self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        # module-level `F = torch.nn.functional`, `mm = torch.matmul`
        for stmt in _module_level(self.tree.body):
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, (ast.Name, ast.Attribute)):
                qn = self.qualname(stmt.value, None)
                if qn:
                    for t in stmt.targets:
                        if isinstance(t, ast.Name):
                            self.aliases[t.id] = qn

    def is_kernel(self, fn) -> bool:
        if fn not in self._kernel_cache:
            res = False
            for d in fn.decorator_list:
                target = d.func if isinstance(d, ast.Call) else d
                qn = self.qualname(target, None)
                if qn and qn.split(".")[0] == "triton" and qn.split(".")[-1] in ("jit", "autotune", "heuristics"):
                    res = True
            self._kernel_cache[fn] = res
        return self._kernel_cache[fn]

    def _collect_defs(self):
        for stmt in _module_level(self.tree.body):
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.funcs[("", stmt.name)] = _Func(stmt, None, self.is_kernel(stmt))
            elif isinstance(stmt, ast.ClassDef):
                self.classes[stmt.name] = stmt
                meths = self.methods.setdefault(stmt.name, {})
                for s in _module_level(stmt.body):
                    if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        decos = {self._deco_name(d) for d in s.decorator_list}
                        f = _Func(s, stmt.name, self.is_kernel(s), static="staticmethod" in decos,
                                  classmeth="classmethod" in decos, prop="property" in decos)
                        meths[s.name] = f
                        self.funcs[(stmt.name, s.name)] = f

    @staticmethod
    def _deco_name(d) -> str:
        d = d.func if isinstance(d, ast.Call) else d
        if isinstance(d, ast.Name):
            return d.id
        if isinstance(d, ast.Attribute):
            return d.attr
        return ""

    def lookup(self, name: str, ctx: _Ctx | None):
        if ctx is not None and ctx.func is not None and name in ctx.env:
            return ctx.env[name]
        if name in self.aliases:
            return ("alias", self.aliases[name])
        if name in self.module_env:
            return self.module_env[name]
        f = self.funcs.get(("", name))
        if f is not None:
            return ("kernel", name) if f.kernel else ("func", ("", name))
        if name in self.classes:
            return ("cls", name)
        if name in _BUILTINS:
            return ("builtin", name)
        return U

    def is_builtin(self, name: str, ctx: _Ctx | None) -> bool:
        return self.lookup(name, ctx) == ("builtin", name)

    def qualname(self, node, ctx: _Ctx | None) -> str | None:
        if isinstance(node, ast.Name):
            k = self.lookup(node.id, ctx)
            return k[1] if isinstance(k, tuple) and k[0] == "alias" else None
        if isinstance(node, ast.Attribute):
            base = self.qualname(node.value, ctx)
            return f"{base}.{node.attr}" if base else None
        # getattr(torch, "name") is deliberately not resolved: a name fetched that way is the dynamic
        # guard's business (tests/fixtures/guard/dyn_* rely on it)
        return None

    # -- classes ------------------------------------------------------------------------------
    def mro(self, cls: str) -> list[str]:
        out, stack = [], [cls]
        while stack:
            c = stack.pop(0)
            if c in out or c not in self.classes:
                continue
            out.append(c)
            for b in self.classes[c].bases:
                if isinstance(b, ast.Name) and b.id in self.classes:
                    stack.append(b.id)
        return out

    def method(self, cls: str, name: str) -> _Func | None:
        for c in self.mro(cls):
            f = self.methods.get(c, {}).get(name)
            if f is not None:
                return f
        return None

    def nn_base(self, cls: str) -> str | None:
        """The torch.nn layer a candidate class derives from (outside the file), if it computes."""
        for c in self.mro(cls):
            for b in self.classes[c].bases:
                layer = _nn_layer(self.qualname(b, None))
                if layer and layer not in NN_NONCOMPUTE_MODULES:
                    return layer
        return None

    def is_autograd_fn(self, cls: str) -> bool:
        for c in self.mro(cls):
            for b in self.classes[c].bases:
                if self.qualname(b, None) in ("torch.autograd.Function", "torch.autograd.function.Function"):
                    return True
        return False

    def member_kind(self, cls: str, attr: str, bound: bool):
        f = self.method(cls, attr)
        if f is not None:
            if f.prop and bound:
                return f.ret
            return ("method", cls, attr, bound)
        if not bound and attr == "apply" and self.is_autograd_fn(cls):
            return ("apply", cls)
        for c in self.mro(cls):
            if attr in self.containers.get(c, {}):
                return ("nnlist", self.containers[c][attr])
            if attr in self.class_attrs.get(c, {}):
                return self.class_attrs[c][attr]
        if bound and self.nn_base(cls) and _weightish(attr):
            return T
        return U

    # -- node iteration -----------------------------------------------------------------------
    def scope_nodes(self, root):
        """Nodes under a function, nested non-kernel defs included, nested kernels skipped."""
        stack = list(ast.iter_child_nodes(root))
        while stack:
            n = stack.pop()
            yield n
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and self.is_kernel(n):
                continue
            stack.extend(ast.iter_child_nodes(n))

    @staticmethod
    def own_nodes(root):
        """Nodes of a function's own body (no nested defs, lambdas or classes)."""
        stack = list(ast.iter_child_nodes(root))
        while stack:
            n = stack.pop()
            yield n
            if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                stack.extend(ast.iter_child_nodes(n))

    def module_nodes(self):
        stack = list(self.tree.body)
        while stack:
            n = stack.pop()
            yield n
            if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                stack.extend(ast.iter_child_nodes(n))

    # -- bindings -----------------------------------------------------------------------------
    def _bindings_of(self, f: _Func | None) -> list:
        out = []
        nodes = self.scope_nodes(f.node) if f is not None else self.module_nodes()
        for n in nodes:
            if isinstance(n, ast.Assign):
                out.extend(("assign", t, n.value) for t in n.targets)
            elif isinstance(n, ast.AnnAssign) and n.value is not None:
                out.append(("assign", n.target, n.value))
            elif isinstance(n, ast.NamedExpr):
                out.append(("assign", n.target, n.value))
            elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
                out.append(("aug", n.target, n))
            elif isinstance(n, (ast.For, ast.AsyncFor, ast.comprehension)):
                out.append(("iter", n.target, n.iter))
            elif isinstance(n, (ast.With, ast.AsyncWith)):
                out.extend(("unknown", i.optional_vars, None) for i in n.items if i.optional_vars is not None)
            elif isinstance(n, ast.ExceptHandler) and n.name:
                out.append(("unknown", ast.Name(id=n.name), None))
            elif f is not None and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                a = n.args
                for p in a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x]:
                    out.append(("unknown", ast.Name(id=p.arg), None))
                if not isinstance(n, ast.Lambda):
                    out.append(("kernel" if self.is_kernel(n) else "unknown", ast.Name(id=n.name), None))
            elif f is not None and isinstance(n, ast.ClassDef):
                out.append(("unknown", ast.Name(id=n.name), None))
        return out

    def _bind(self, target, kind, new: dict, sink=None):
        if isinstance(target, ast.Name):
            new[target.id] = _join(new.get(target.id, BOT), kind)
        elif isinstance(target, (ast.Tuple, ast.List)):
            elts = target.elts
            starred = any(isinstance(e, ast.Starred) for e in elts)
            if (isinstance(kind, tuple) and kind[0] == "tuple" and not starred
                    and len(kind[1]) == len(elts)):
                for e, k in zip(elts, kind[1]):
                    self._bind(e, k, new, sink)
                return
            ek = _elem(kind)
            for e in elts:
                if isinstance(e, ast.Starred):
                    self._bind(e.value, S if ek == S else U, new, sink)
                else:
                    self._bind(e, ek, new, sink)
        elif isinstance(target, ast.Starred):
            self._bind(target.value, U, new, sink)
        elif sink is not None and isinstance(target, ast.Attribute):
            sink(target, kind)

    def _iter_kind(self, target, it, ctx, new, sink=None):
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and self.is_builtin(it.func.id, ctx):
            name = it.func.id
            if name == "range":
                self._bind(target, S, new, sink)
                return
            if name == "enumerate" and it.args and isinstance(target, ast.Tuple) and len(target.elts) == 2:
                self._bind(target.elts[0], S, new, sink)
                self._iter_kind(target.elts[1], it.args[0], ctx, new, sink)
                return
            if (name == "zip" and isinstance(target, ast.Tuple) and len(target.elts) == len(it.args)
                    and not any(isinstance(a, ast.Starred) for a in it.args)):
                for t, a in zip(target.elts, it.args):
                    self._iter_kind(t, a, ctx, new, sink)
                return
        self._bind(target, _elem(self.eval(it, ctx)), new, sink)

    def _init_env(self, f: _Func) -> dict:
        env = {}
        a = f.node.args
        positional = a.posonlyargs + a.args
        defaults = {}
        if a.defaults:
            for p, d in zip(positional[-len(a.defaults):], a.defaults):
                defaults[p.arg] = d
        for p, d in zip(a.kwonlyargs, a.kw_defaults):
            if d is not None:
                defaults[p.arg] = d
        for i, p in enumerate(positional + a.kwonlyargs):
            if i == 0 and positional and f.cls is not None and not f.static:
                env[p.arg] = ("cls", f.cls) if f.classmeth else ("self", f.cls)
                continue
            k = self._annotation_kind(p.annotation)
            if k is None:
                d = defaults.get(p.arg)
                if f.entry:
                    if d is None:
                        k = T
                    elif isinstance(d, ast.Constant) and d.value is not None:
                        k = S
                    else:
                        k = U
                else:
                    k = f.params.get(p.arg, BOT)
            env[p.arg] = k
        if a.vararg:
            env[a.vararg.arg] = U
        if a.kwarg:
            env[a.kwarg.arg] = U
        return env

    def _annotation_kind(self, ann):
        if ann is None:
            return None
        qn = self.qualname(ann, None)
        if qn in ("torch.Tensor", "torch.nn.Parameter") or (isinstance(ann, ast.Name) and ann.id == "Tensor"):
            return T
        if isinstance(ann, ast.Name) and ann.id in ("int", "float", "bool", "str") and self.is_builtin(ann.id, None):
            return S
        return None

    def _solve_env(self, f: _Func | None) -> dict:
        if f is None:
            bindings, base = self.module_bindings, {}
        else:
            bindings, base = f.bindings, self._init_env(f)
        env = dict(base)
        for b in bindings:
            if isinstance(b[1], ast.Name):
                env.setdefault(b[1].id, BOT)
            else:
                for t in _flatten_targets([b[1]]):
                    if isinstance(t, ast.Name):
                        env.setdefault(t.id, BOT)
        for _ in range(10):
            if f is None:
                self.module_env = env
            ctx = _Ctx(env, f)
            new = dict(base)
            for kind, target, value in bindings:
                if kind == "assign":
                    self._bind(target, self.eval(value, ctx), new)
                elif kind == "aug":
                    old = env.get(target.id, BOT)
                    self._bind(target, self._binop_kind(old, self.eval(value.value, ctx)), new)
                elif kind == "iter":
                    self._iter_kind(target, value, ctx, new)
                elif kind == "kernel":
                    self._bind(target, ("kernel", target.id), new)
                else:
                    self._bind(target, U, new)
            for name in env:
                new.setdefault(name, BOT)
            if new == env:
                break
            env = new
        if f is None:
            self.module_env = env
        return env

    def ctx(self, f: _Func | None) -> _Ctx:
        return _Ctx(f.env if f is not None else self.module_env, f)

    # -- the whole-file fixed point -----------------------------------------------------------
    def solve(self):
        for _ in range(12):
            before = self._signature()
            self._solve_env(None)
            for f in self.funcs.values():
                if not f.kernel:
                    f.env = self._solve_env(f)
            self._collect_class_attrs()
            self._collect_returns()
            self._collect_params()
            if self._signature() == before:
                break
        # what is still unknown after the fixed point is unknown
        for f in self.funcs.values():
            f.env = {k: (U if v == BOT else v) for k, v in f.env.items()}
            f.params = {k: (U if v == BOT else v) for k, v in f.params.items()}
            f.ret = U if f.ret == BOT else f.ret
        for attrs in self.class_attrs.values():
            for k, v in attrs.items():
                if v == BOT:
                    attrs[k] = U
        self.module_env = {k: (U if v == BOT else v) for k, v in self.module_env.items()}
        self._memo = {}

    def _signature(self):
        return repr((sorted(self.module_env.items(), key=str),
                     [(sorted(f.env.items(), key=str), f.ret, sorted(f.params.items(), key=str))
                      for f in self.funcs.values()],
                     sorted((c, sorted(a.items(), key=str)) for c, a in self.class_attrs.items()),
                     sorted((c, sorted(a.items())) for c, a in self.containers.items())))

    def _collect_class_attrs(self):
        attrs: dict[str, dict[str, object]] = {}
        containers: dict[str, dict[str, str]] = {}
        for cname, cdef in self.classes.items():
            ca = attrs.setdefault(cname, {})
            mctx = self.ctx(None)
            for s in _module_level(cdef.body):
                if isinstance(s, ast.Assign):
                    for t in s.targets:
                        tmp: dict = {}
                        self._bind(t, self.eval(s.value, mctx), tmp)
                        for k, v in tmp.items():
                            ca[k] = _join(ca.get(k, BOT), v)
            for f in self.methods.get(cname, {}).values():
                if f.kernel or f.self_name is None or f.classmeth:
                    continue
                ctx = self.ctx(f)
                sname = f.self_name

                def sink(target, kind, ca=ca, sname=sname):
                    if isinstance(target.value, ast.Name) and target.value.id == sname:
                        ca[target.attr] = _join(ca.get(target.attr, BOT), kind)

                for n in self.scope_nodes(f.node):
                    if isinstance(n, ast.Assign):
                        for t in n.targets:
                            self._bind(t, self.eval(n.value, ctx), {}, sink)
                    elif isinstance(n, ast.AnnAssign) and n.value is not None:
                        self._bind(n.target, self.eval(n.value, ctx), {}, sink)
                    elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Attribute):
                        k = self._binop_kind(self.eval(n.target, ctx), self.eval(n.value, ctx))
                        self._bind(n.target, k, {}, sink)
                    elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
                        recv = n.func.value
                        meth = n.func.attr
                        if isinstance(recv, ast.Name) and recv.id == sname and n.args:
                            name = _str_const(n.args[0])
                            if name and meth in ("register_buffer", "register_parameter") and len(n.args) > 1:
                                v = n.args[1]
                                k = S if isinstance(v, ast.Constant) and v.value is None else T
                                ca[name] = _join(ca.get(name, BOT), k)
                            elif name and meth == "add_module" and len(n.args) > 1:
                                ca[name] = _join(ca.get(name, BOT), self.eval(n.args[1], ctx))
                        elif (isinstance(recv, ast.Attribute) and isinstance(recv.value, ast.Name)
                              and recv.value.id == sname and meth in ("append", "extend", "insert", "add_module")
                              and n.args):
                            k = self.eval(n.args[-1], ctx)
                            if meth == "extend":
                                k = _elem(k)
                            if isinstance(k, tuple) and k[0] == "nn":
                                containers.setdefault(cname, {})[recv.attr] = k[1]
                    elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "setattr"
                          and len(n.args) == 3 and isinstance(n.args[0], ast.Name) and n.args[0].id == sname
                          and _str_const(n.args[1])):
                        name = n.args[1].value
                        ca[name] = _join(ca.get(name, BOT), self.eval(n.args[2], ctx))
        self.class_attrs = attrs
        self.containers = containers

    def _collect_returns(self):
        for f in self.funcs.values():
            if f.kernel:
                continue
            ctx = self.ctx(f)
            ret, has_return = BOT, False
            for n in self.own_nodes(f.node):
                if isinstance(n, (ast.Yield, ast.YieldFrom)):
                    ret, has_return = U, True
                    break
                if isinstance(n, ast.Return):
                    has_return = True
                    ret = _join(ret, S if n.value is None else self.eval(n.value, ctx))
            f.ret = ret if has_return else S

    def _collect_params(self):
        params: dict[_Func, dict] = {f: {} for f in self.funcs.values()}
        scopes = [(None, self.module_nodes())] + [
            (f, self.scope_nodes(f.node)) for f in self.funcs.values() if not f.kernel]
        for f, nodes in scopes:
            ctx = self.ctx(f)
            for n in nodes:
                if not isinstance(n, ast.Call):
                    continue
                for g, drop in self.call_targets(n, ctx):
                    self._record_args(g, drop, n, ctx, params[g])
        for f, p in params.items():
            f.params = p

    def _record_args(self, g: _Func, drop: bool, call: ast.Call, ctx: _Ctx, out: dict):
        a = g.node.args
        positional = [p.arg for p in a.posonlyargs + a.args]
        if drop:
            positional = positional[1:]
        passed = set()
        for i, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred):
                for p in positional[i:]:
                    out[p] = _join(out.get(p, BOT), U)
                    passed.add(p)
                break
            if i < len(positional):
                out[positional[i]] = _join(out.get(positional[i], BOT), self.eval(arg, ctx))
                passed.add(positional[i])
        names = set(positional) | {p.arg for p in a.kwonlyargs}
        for kw in call.keywords:
            if kw.arg is None:
                for p in names - passed:
                    out[p] = _join(out.get(p, BOT), U)
                    passed.add(p)
            elif kw.arg in names:
                out[kw.arg] = _join(out.get(kw.arg, BOT), self.eval(kw.value, ctx))
                passed.add(kw.arg)
        all_pos = a.posonlyargs + a.args
        defaults = dict(zip([p.arg for p in all_pos[-len(a.defaults):]], a.defaults)) if a.defaults else {}
        defaults.update({p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None})
        mctx = self.ctx(None)
        for p in names - passed:
            if p in defaults:
                out[p] = _join(out.get(p, BOT), self.eval(defaults[p], mctx))

    # -- calls and targets --------------------------------------------------------------------
    def callee_funcs(self, fk) -> list[tuple[_Func, bool]]:
        if not isinstance(fk, tuple):
            return []
        tag = fk[0]
        f = None
        drop = True
        if tag == "func":
            f, drop = self.funcs.get(fk[1]), False
        elif tag == "method":
            f = self.method(fk[1], fk[2])
            if f is not None:
                drop = False if f.static else (True if f.classmeth else fk[3])
        elif tag == "cls":
            f = self.method(fk[1], "__init__")
        elif tag == "inst":
            f = self.method(fk[1], "__call__") or self.method(fk[1], "forward")
        elif tag == "apply":
            f = self.method(fk[1], "forward")
        if f is None or f.kernel:
            return []
        return [(f, drop)]

    def call_targets(self, call: ast.Call, ctx: _Ctx) -> list[tuple[_Func, bool]]:
        return self.callee_funcs(self.eval(call.func, ctx))

    def refs(self, node, ctx: _Ctx) -> list[_Func]:
        out = []
        if isinstance(node, ast.Call):
            out += [f for f, _ in self.call_targets(node, ctx)]
        elif isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
            k = self.eval(node, ctx)
            if isinstance(k, tuple) and k[0] in ("func", "method", "apply"):
                out += [f for f, _ in self.callee_funcs(k)]
            if isinstance(node, ast.Attribute):
                rk = self.eval(node.value, ctx)
                if isinstance(rk, tuple) and rk[0] in ("self", "inst"):
                    f = self.method(rk[1], node.attr)
                    if f is not None and f.prop and not f.kernel:
                        out.append(f)
        return out

    def reach(self, roots) -> set[_Func]:
        seen: set[_Func] = set()
        stack = [r for r in roots if r is not None]
        while stack:
            f = stack.pop()
            if f in seen or f.kernel:
                continue
            seen.add(f)
            ctx = self.ctx(f)
            for n in self.scope_nodes(f.node):
                stack.extend(self.refs(n, ctx))
        return seen

    # -- evaluation ---------------------------------------------------------------------------
    def eval(self, node, ctx: _Ctx):
        """The kind of an expression (memoized per function once the fixed point is reached)."""
        memo = self._memo
        if memo is None:
            return self._eval(node, ctx)
        key = (id(node), id(ctx.env))
        if key not in memo:
            memo[key] = self._eval(node, ctx)
        return memo[key]

    def _eval(self, node, ctx: _Ctx):
        if isinstance(node, ast.Constant):
            return S
        if isinstance(node, ast.Name):
            return self.lookup(node.id, ctx)
        if isinstance(node, ast.Attribute):
            qn = self.qualname(node, ctx)
            if qn:
                return ("alias", qn)
            return self.attr_kind(self.eval(node.value, ctx), node.attr)
        if isinstance(node, ast.Call):
            return self.call_kind(node, ctx)
        if isinstance(node, ast.Subscript):
            vk = self.eval(node.value, ctx)
            if vk == T:
                return T
            if isinstance(vk, tuple):
                if vk[0] == "tuple":
                    idx = node.slice
                    if (isinstance(idx, ast.Constant) and isinstance(idx.value, int)
                            and -len(vk[1]) <= idx.value < len(vk[1])):
                        k = vk[1][idx.value]
                        # callables kept in containers are not followed (left to the dynamic guard)
                        return U if isinstance(k, tuple) and k[0] != "tuple" else k
                    if isinstance(idx, ast.Slice):
                        return S if all(_nontensor(e) for e in vk[1]) else U
                    return _elem(vk)
                if vk[0] in ("nnlist",) or (vk[0] == "nn" and vk[1] == "Sequential"):
                    return _elem(vk)
                if vk[0] == "kernel":
                    return vk
                if vk[0] == "alias":
                    return U
            if vk == S:
                return S
            return BOT if vk == BOT else U
        if isinstance(node, ast.BinOp):
            return self._binop_kind(self.eval(node.left, ctx), self.eval(node.right, ctx))
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.Not):
                return S
            k = self.eval(node.operand, ctx)
            return T if k == T else (S if _nontensor(k) else k if k == BOT else U)
        if isinstance(node, ast.BoolOp):
            out = BOT
            for v in node.values:
                out = _join(out, self.eval(v, ctx))
            return out
        if isinstance(node, ast.IfExp):
            return _join(self.eval(node.body, ctx), self.eval(node.orelse, ctx))
        if isinstance(node, ast.Compare):
            kinds = [self.eval(x, ctx) for x in [node.left, *node.comparators]]
            if T in kinds and any(isinstance(op, (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE))
                                  for op in node.ops):
                return T
            return BOT if BOT in kinds else S
        if isinstance(node, (ast.Tuple, ast.List)):
            if any(isinstance(e, ast.Starred) for e in node.elts) or len(node.elts) > 16:
                return S if all(_nontensor(self.eval(getattr(e, "value", e), ctx)) for e in node.elts) else U
            return ("tuple", tuple(self.eval(e, ctx) for e in node.elts))
        if isinstance(node, (ast.Set, ast.Dict, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
                             ast.JoinedStr, ast.Lambda, ast.FormattedValue)):
            return S
        if isinstance(node, ast.NamedExpr):
            return self.eval(node.value, ctx)
        return U

    @staticmethod
    def _binop_kind(a, b):
        if a == T or b == T:
            return T
        if _nontensor(a) and _nontensor(b):
            return S
        if BOT in (a, b):
            return BOT
        return U

    def attr_kind(self, rk, attr: str):
        if rk == T:
            if attr in _TENSOR_SCALAR_ATTRS:
                return S
            if attr in _TENSOR_VIEW_ATTRS:
                return T
            return U
        if rk == S:
            return S
        if rk == BOT:
            return BOT
        if isinstance(rk, tuple):
            tag = rk[0]
            if tag in ("self", "inst"):
                return self.member_kind(rk[1], attr, True)
            if tag == "cls":
                return self.member_kind(rk[1], attr, False)
            if tag == "super":
                for c in self.mro(rk[1])[1:]:
                    if attr in self.methods.get(c, {}):
                        return ("method", c, attr, True)
                return U
            if tag == "nn":
                if _weightish(attr):
                    return T
                return U
            if tag == "ext":
                return ("extfn",)
            if tag == "alias":
                return ("alias", f"{rk[1]}.{attr}")
        return U

    def call_kind(self, node: ast.Call, ctx: _Ctx):
        func = node.func
        if isinstance(func, ast.Name) and self.is_builtin(func.id, ctx):
            return self._builtin_kind(func.id, node, ctx)
        qn = self.qualname(func, ctx)
        if qn:
            return self._qual_call_kind(qn, node, ctx)
        if isinstance(func, ast.Attribute):
            rk = self.eval(func.value, ctx)
            name = func.attr
            if rk == T:
                if name in _TENSOR_QUERY_METHODS:
                    return S
                return U if name == "type" else T
            if rk == S:
                return S
            if rk in (U, BOT):
                if name in _TENSOR_QUERY_METHODS:
                    return S
                if name in _TENSOR_ONLY_METHODS or name in _LIKELY_TENSOR_COMPUTE:
                    return T
                return BOT if rk == BOT else U
            if isinstance(rk, tuple) and rk[0] == "nn" and name in _NN_CALL_METHODS:
                return T
            if isinstance(rk, tuple) and rk[0] == "tuple":
                return U
        return self._callee_kind(self.eval(func, ctx), node, ctx)

    def _callee_kind(self, fk, node, ctx):
        if not isinstance(fk, tuple):
            return BOT if fk == BOT else U
        tag = fk[0]
        if tag in ("func", "method", "apply"):
            targets = self.callee_funcs(fk)
            return targets[0][0].ret if targets else U
        if tag == "cls":
            if self.nn_base(fk[1]) and not (self.method(fk[1], "forward") or self.method(fk[1], "__call__")):
                return ("nn", self.nn_base(fk[1]))
            return ("inst", fk[1])
        if tag == "inst":
            targets = self.callee_funcs(fk)
            if targets:
                return targets[0][0].ret
            return T if self.nn_base(fk[1]) else U
        if tag == "nn":
            return T
        if tag == "alias":
            return self._qual_call_kind(fk[1], node, ctx)
        if tag == "extfn":
            return T
        if tag == "kernel":
            return S
        return U

    def _builtin_kind(self, name: str, node: ast.Call, ctx: _Ctx):
        if name in ("max", "min", "sum", "abs", "pow", "round", "divmod"):
            kinds = [self.eval(a, ctx) for a in node.args]
            if T in kinds:
                return T
            if all(_nontensor(k) for k in kinds):
                return S
            return BOT if BOT in kinds else U
        if name == "getattr" and len(node.args) >= 2 and _str_const(node.args[1]):
            rk = self.eval(node.args[0], ctx)
            if isinstance(rk, tuple) and rk[0] == "alias":
                return U
            return self.attr_kind(rk, node.args[1].value)
        if name == "super":
            return ("super", ctx.cls) if ctx.cls else U
        if name in ("iter", "next", "getattr", "vars", "globals", "locals", "eval", "exec", "__import__"):
            return U
        return S

    def _qual_call_kind(self, qn: str, node: ast.Call, ctx: _Ctx):
        parts = qn.split(".")
        if parts[0] == "torch":
            if qn in ("torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.nn.Buffer",
                      "torch.nn.parameter.Buffer"):
                return T
            if qn in ("torch.utils.cpp_extension.load_inline", "torch.utils.cpp_extension.load"):
                return ("ext",)
            layer = _nn_layer(qn)
            if layer:
                if layer in ("ModuleList", "ModuleDict", "Sequential"):
                    if layer == "Sequential":
                        return ("nn", "Sequential")
                    inner = self._inner_layer(node, ctx)
                    return ("nnlist", inner) if inner else S
                if layer in NN_NONCOMPUTE_MODULES:
                    return S
                return ("nn", layer)
            if qn.startswith("torch.cuda."):
                return S
            if qn.startswith("torch.Tensor."):
                return S if parts[-1] in _TENSOR_QUERY_METHODS else T
            if len(parts) == 2:
                name = parts[1]
                if name in _TORCH_QUERY_FUNCS or name in ("Stream", "Event", "Generator"):
                    return S
                if name in TORCH_FUNCTIONS or name[:1].isupper():
                    return T
            if _torch_compute(qn):
                return T
            return U
        if parts[0] in _SCALAR_MODULES:
            return S
        return U

    def _inner_layer(self, node: ast.Call, ctx: _Ctx) -> str | None:
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            for n in ast.walk(arg):
                if isinstance(n, ast.Call):
                    layer = _nn_layer(self.qualname(n.func, ctx))
                    if layer and layer not in NN_NONCOMPUTE_MODULES:
                        return layer
            k = _elem(self.eval(arg, ctx))
            if isinstance(k, tuple) and k[0] == "nn":
                return k[1]
        return None

    # -- findings -----------------------------------------------------------------------------
    def add(self, rule: str, node_or_line, message: str, evidence: list[str]):
        assert rule in RULES, rule
        line = node_or_line if isinstance(node_or_line, int) else getattr(node_or_line, "lineno", None)
        key = (rule, line or 0)
        if key in self.findings:
            f = self.findings[key]
            for e in evidence:
                if e not in f.evidence:
                    f.evidence.append(e)
            return
        message += _INSTEAD.get(rule, "")
        self.findings[key] = Finding(rule=rule, message=message, line=line, evidence=list(evidence))

    def src(self, node, limit: int = 80) -> str:
        text = None
        if getattr(node, "end_lineno", None) is not None:
            if self._lines is None:
                # the line breaks ast counts (str.splitlines would also split at \f, \x1c, ...)
                self._lines = re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", self.source)
            lines = self._lines[node.lineno - 1: node.end_lineno]
            if lines:
                # col offsets are in UTF-8 bytes
                if len(lines) == 1:
                    text = lines[0].encode()[node.col_offset: node.end_col_offset].decode(errors="replace")
                else:
                    first = lines[0].encode()[node.col_offset:].decode(errors="replace")
                    last = lines[-1].encode()[: node.end_col_offset].decode(errors="replace")
                    text = first + "".join(lines[1:-1]) + last
        if text is None:
            try:
                text = ast.unparse(node)
            except Exception:  # pragma: no cover - unparse of odd nodes
                text = type(node).__name__
        text = " ".join(text.split())
        return text if len(text) <= limit else text[: limit - 1] + "…"

    # -- forward scope ------------------------------------------------------------------------
    def forward_scope(self) -> set[_Func]:
        if "ModelNew" not in self.classes:
            return set()
        visible: dict[str, _Func] = {}
        for c in reversed(self.mro("ModelNew")):
            visible.update(self.methods.get(c, {}))
        init = visible.get("__init__")
        init_reach = self.reach([init]) if init else set()
        fwd_reach = self.reach([visible.get("forward"), visible.get("__call__")])
        others = [f for n, f in visible.items()
                  if n != "__init__" and not f.kernel and f not in init_reach and f not in fwd_reach]
        scope = fwd_reach | self.reach(others)
        scope.discard(init)
        return scope

    def check_scope(self, f: _Func):
        ctx = self.ctx(f)
        where = f.display
        for n in self.scope_nodes(f.node):
            if isinstance(n, ast.Call):
                self._check_call(n, ctx, where)
            elif isinstance(n, ast.BinOp):
                if T in (self.eval(n.left, ctx), self.eval(n.right, ctx)) and not self._inside_tensor_op(n, ctx):
                    ev = self.src(n)
                    self.add("torch-compute", n, f"`{ev}` in {where} applies a tensor operator in PyTorch", [ev])
            elif isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd, ast.Invert)):
                if self.eval(n.operand, ctx) == T and not self._inside_tensor_op(n, ctx):
                    ev = self.src(n)
                    self.add("torch-compute", n, f"`{ev}` in {where} applies a tensor operator in PyTorch", [ev])
            elif isinstance(n, ast.Compare):
                operands = [n.left, *n.comparators]
                if (self.eval(n, ctx) == T
                        and not any(isinstance(o, ast.Constant) and o.value is None for o in operands)
                        and not self._inside_tensor_op(n, ctx)):
                    ev = self.src(n)
                    self.add("torch-compute", n, f"`{ev}` in {where} compares tensors in PyTorch", [ev])
            elif isinstance(n, ast.AugAssign):
                if T in (self.eval(n.target, ctx), self.eval(n.value, ctx)):
                    ev = self.src(n)
                    self.add("torch-compute", n, f"`{ev}` in {where} applies a tensor operator in PyTorch", [ev])
            elif isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load):
                idx = n.slice.elts if isinstance(n.slice, ast.Tuple) else [n.slice]
                if self.eval(n.value, ctx) == T and any(self.eval(i, ctx) == T for i in idx):
                    ev = self.src(n)
                    self.add("torch-compute", n,
                             f"`{ev}` in {where} indexes a tensor with a tensor (a PyTorch gather)", [ev])
        if f.name != "__init__":
            self._check_stateful(f, ctx, where)

    def _inside_tensor_op(self, node, ctx) -> bool:
        """Is the node an operand of an enclosing tensor operator (which is the one reported)?"""
        parent = self.parents.get(node)
        return isinstance(parent, (ast.BinOp, ast.UnaryOp)) and self.eval(parent, ctx) == T

    def _check_call(self, n: ast.Call, ctx: _Ctx, where: str):
        func = n.func
        if isinstance(func, ast.Name) and self.is_builtin(func.id, ctx):
            if func.id in ("sum", "max", "min", "abs", "pow", "round", "divmod") and any(
                    self.eval(a, ctx) == T for a in n.args):
                ev = self.src(n)
                self.add("torch-compute", n, f"`{ev}` in {where} runs PyTorch ops on a tensor", [ev])
            return
        qn = self.qualname(func, ctx)
        if qn is None:
            fk = self.eval(func, ctx)
            if isinstance(fk, tuple) and fk[0] == "alias":
                qn = fk[1]
        if qn:
            ev = self.src(func)
            parts = qn.split(".")
            if len(parts) >= 2 and _nn_layer(".".join(parts[:-1])) and parts[-1] in _NN_CALL_METHODS:
                self.add("nn-compute-layer", n, f"{self.src(n)} in {where} runs nn.{parts[-2]}: PyTorch computes it",
                         [self.src(n), f"nn.{parts[-2]}"])
            elif _torch_compute(qn):
                msg = f"{ev} in {where} computes with PyTorch" + (f" ({qn})" if qn != ev else "")
                self.add("torch-compute", n, msg, [ev] if qn == ev else [ev, qn])
            return
        if isinstance(func, ast.Attribute):
            rk = self.eval(func.value, ctx)
            name = func.attr
            ev = f"{self.src(func.value, 40)}.{name}()"
            if name in _STREAM_METHODS or name in _SUBCLASS_NAMES:
                return  # their own rules
            if rk == T:
                if name not in TENSOR_METHODS:
                    self.add("torch-compute", n, f"{ev} in {where} is a PyTorch tensor op", [ev])
                return
            if rk in (U, BOT):
                if name in _LIKELY_TENSOR_COMPUTE:
                    self.add("torch-compute", n, f"{ev} in {where} is a PyTorch tensor op", [ev])
                return
            if isinstance(rk, tuple) and rk[0] == "nn" and name in _NN_CALL_METHODS:
                self.add("nn-compute-layer", n, f"{self.src(n)} in {where} runs nn.{rk[1]}: PyTorch computes it",
                         [self.src(n), f"nn.{rk[1]}"])
                return
            if (isinstance(rk, tuple) and rk[0] == "super" and name in _NN_CALL_METHODS
                    and self.nn_base(rk[1]) and not any(name in self.methods.get(c, {})
                                                         for c in self.mro(rk[1])[1:])):
                layer = self.nn_base(rk[1])
                self.add("nn-compute-layer", n, f"{self.src(n)} in {where} runs nn.{layer}: PyTorch computes it",
                         [self.src(n), f"nn.{layer}"])
                return
        fk = self.eval(func, ctx)
        layer = None
        if isinstance(fk, tuple) and fk[0] == "nn":
            layer = fk[1]
        elif (isinstance(fk, tuple) and fk[0] == "inst" and self.nn_base(fk[1])
              and not (self.method(fk[1], "forward") or self.method(fk[1], "__call__"))):
            layer = self.nn_base(fk[1])
        if layer:
            ev = self.src(n)
            self.add("nn-compute-layer", n, f"{ev} in {where} calls nn.{layer}: PyTorch computes it",
                     [ev, f"nn.{layer}"])

    def _check_stateful(self, f: _Func, ctx: _Ctx, where: str):
        sname = f.self_name
        declared_global = set()
        for n in self.scope_nodes(f.node):
            if isinstance(n, ast.Global):
                declared_global.update(n.names)

        def state_root(t) -> str | None:
            """'self' when t writes into self, else None."""
            root = _chain_root(t)
            if not isinstance(root, ast.Name):
                return None
            if sname and root.id == sname:
                return "self"
            return None

        msg_tail = "forward must not keep state between calls (build it in __init__)"
        for n in self.scope_nodes(f.node):
            targets = []
            if isinstance(n, ast.Assign):
                targets = n.targets
            elif isinstance(n, (ast.AugAssign, ast.AnnAssign)):
                targets = [n.target]
            elif isinstance(n, ast.Delete):
                targets = n.targets
            for t in _flatten_targets(targets):
                if isinstance(t, (ast.Attribute, ast.Subscript)):
                    if state_root(t):
                        ev = self.src(n)
                        self.add("stateful-forward", n, f"{where} writes to self ({self.src(t, 40)}): {msg_tail}", [ev])
                elif isinstance(t, ast.Name) and t.id in declared_global:
                    ev = self.src(n)
                    self.add("stateful-forward", n, f"{where} assigns the module global {t.id}: {msg_tail}", [ev])
            if isinstance(n, ast.Call):
                func = n.func
                sets_attr = (isinstance(func, ast.Name) and func.id in ("setattr", "delattr")
                             and self.is_builtin(func.id, ctx)) or (
                    isinstance(func, ast.Attribute) and func.attr in ("__setattr__", "__delattr__")
                    and isinstance(func.value, ast.Name) and func.value.id in ("object", "type"))
                registers = (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                             and func.value.id == sname and func.attr in (
                                 "register_buffer", "register_parameter", "add_module", "register_module"))
                if (sets_attr and n.args and state_root(n.args[0]) == "self") or registers:
                    ev = self.src(n)
                    self.add("stateful-forward", n, f"{where} sets attributes of self ({ev}): {msg_tail}", [ev])
                elif (isinstance(func, ast.Attribute) and func.attr in _MUTATORS
                      and isinstance(func.value, (ast.Attribute, ast.Subscript, ast.Name))
                      and not (isinstance(func.value, ast.Name) and func.value.id == sname)):
                    args = [*n.args, *(k.value for k in n.keywords)]
                    if state_root(func.value) and args and any(self.eval(a, ctx) != S for a in args):
                        ev = self.src(n)
                        self.add("stateful-forward", n, f"{where} stores into a container on self ({ev}): {msg_tail}",
                                 [ev])

    # -- whole-file rules ---------------------------------------------------------------------
    def enclosing_function(self, node):
        p = self.parents.get(node)
        while p is not None:
            if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                return p
            p = self.parents.get(p)
        return None

    def import_rooted(self, node) -> bool:
        root = _chain_root(node)
        if isinstance(root, ast.Call) and isinstance(root.func, ast.Name) and root.func.id == "vars" and root.args:
            return self.import_rooted(root.args[0])
        return isinstance(root, ast.Name) and isinstance(self.lookup(root.id, None), tuple) and \
            self.lookup(root.id, None)[0] == "alias"

    def _in_store_chain(self, node) -> bool:
        cur = node
        while True:
            p = self.parents.get(cur)
            if isinstance(p, (ast.Attribute, ast.Subscript)) and p.value is cur:
                cur = p
                continue
            break
        return isinstance(getattr(cur, "ctx", None), (ast.Store, ast.Del))

    def check_file(self):
        # docstrings and other bare string statements are prose: no source is compiled from them
        docstrings = {n.value for n in ast.walk(self.tree)
                      if isinstance(n, ast.Expr) and _str_const(n.value) is not None}
        self._ext_sources = self._extension_sources()
        self._in_fstring = {v for n in ast.walk(self.tree) if isinstance(n, ast.JoinedStr) for v in n.values}
        # C++ compiled with CUDA's qualifiers defined away: its __device__ functions are host code
        self._device_redefined = any(
            isinstance(n, ast.Constant) and isinstance(n.value, str) and _CPP_QUALIFIER_REDEFINED.search(n.value)
            for n in ast.walk(self.tree))
        kernel_nodes = self.kernel_nodes()
        for n in ast.walk(self.tree):
            if isinstance(n, (ast.Import, ast.ImportFrom)):
                self._check_import(n)
            elif isinstance(n, (ast.Try, ast.TryStar)) and n.handlers:
                self._check_try(n)
            elif isinstance(n, (ast.With, ast.AsyncWith)):
                for item in n.items:
                    e = item.context_expr
                    if isinstance(e, ast.Call) and self.qualname(e.func, None) == "contextlib.suppress":
                        self.add("try-except", n, f"{self.src(e)} swallows exceptions (a try/except in disguise)",
                                 [self.src(e)])
                if isinstance(n, ast.AsyncWith):
                    self.add("concurrency", n, "async with: asynchronous code", ["async with"])
            if isinstance(n, ast.AsyncFunctionDef):
                self.add("concurrency", n, f"async def {n.name}: asynchronous code", [f"async def {n.name}"])
            elif isinstance(n, (ast.Await, ast.AsyncFor)):
                self.add("concurrency", n, "await/async for: asynchronous code", [self.src(n, 40)])
            if isinstance(n, ast.ClassDef):
                self._check_class(n)
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in ("__torch_function__",
                                                                                       "__torch_dispatch__"):
                self.add("tensor-subclass", n, f"defines {n.name}: a hook on every PyTorch call", [n.name])
            elif isinstance(n, ast.Call):
                self._check_call_file(n)
                if id(n) not in kernel_nodes:
                    self._check_file_read(n)
            if isinstance(n, (ast.Attribute, ast.Name)) and isinstance(n.ctx, ast.Load):
                self._check_ref(n)
                if id(n) not in kernel_nodes:
                    self._check_read_ref(n)
            if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                self._check_store(n)
            if isinstance(n, ast.Constant) and isinstance(n.value, (str, bytes)) and n not in docstrings:
                if isinstance(n.value, str) and (_CPP_MARKERS.search(n.value) or id(n) in self._ext_sources):
                    self._check_cpp(n)
                if id(n) not in kernel_nodes:
                    self._check_path_literal(n)

    # -- file-read ----------------------------------------------------------------------------
    def kernel_nodes(self) -> set[int]:
        """ids of every node inside a Triton kernel (its body is not host code)."""
        out: set[int] = set()
        for fn in ast.walk(self.tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and self.is_kernel(fn):
                out.update(id(x) for x in ast.walk(fn))
        return out

    def ctx_at(self, node) -> _Ctx:
        """The inference context of the function the node is in (the module's outside functions)."""
        if self._func_of is None:
            self._func_of = {f.node: f for f in self.funcs.values() if not f.kernel}
        p = self.parents.get(node)
        while p is not None:
            f = self._func_of.get(p)
            if f is not None:
                return self.ctx(f)
            p = self.parents.get(p)
        return self.ctx(None)

    def _read_qualname(self, n: ast.Call) -> str | None:
        qn = self.qualname(n.func, None)
        if qn is None:
            fk = self.eval(n.func, self.ctx_at(n))
            if isinstance(fk, tuple) and fk[0] == "alias":
                qn = fk[1]
        if qn and qn.split(".")[0] in ("posix", "nt", "_io"):
            qn = ("os." if qn[0] != "_" else "io.") + qn.split(".", 1)[-1]
        return qn

    @staticmethod
    def _reads_by_name(qn: str) -> bool:
        parts = qn.split(".")
        return (qn in _READ_CALLS or qn.startswith(_READ_PREFIXES)
                or (parts[0] == "torch" and parts[-1] == "from_file")
                or (parts[0] == "pathlib" and (parts[-1] in _PATH_READ_METHODS or parts[-1] in _PATH_MAYBE_METHODS)))

    def _check_file_read(self, n: ast.Call):
        """file-read: calls that read files, folders, devices or standard input (and io-network for an
        open whose mode writes)."""
        func = n.func
        ev = self.src(n, 60)
        if isinstance(func, ast.Name) and self.is_builtin(func.id, None):
            if func.id == "open":
                self._check_open(n, 1)
            elif func.id == "input":
                self.add("file-read", n, f"{ev} reads standard input", [ev])
            elif func.id == "getattr" and len(n.args) >= 2 and _str_const(n.args[1]):
                name = n.args[1].value
                base = self.qualname(n.args[0], None)
                if name in _PATH_READ_METHODS or (base and self._reads_by_name(f"{base}.{name}")) or (
                        name in _PATH_MAYBE_METHODS and self._file_receiver(n.args[0], n, name)):
                    self.add("file-read", n, f"{ev} fetches a file-reading function by name", [ev])
            return
        qn = self._read_qualname(n)
        if qn:
            parts = qn.split(".")
            if qn in _OPENERS:
                self._check_open(n, 1)
            elif qn == "os.open":
                flags = n.args[1] if len(n.args) > 1 else next((k.value for k in n.keywords if k.arg == "flags"), None)
                names = {x.attr if isinstance(x, ast.Attribute) else x.id for x in ast.walk(flags)
                         if isinstance(x, (ast.Attribute, ast.Name))} if flags is not None else set()
                if names & _OS_OPEN_WRITE_FLAGS:
                    self.add("io-network", n, f"{ev} opens a file descriptor for writing", [ev])
                else:
                    self.add("file-read", n, f"{ev} opens a file descriptor", [ev])
            elif self._reads_by_name(qn):
                self.add("file-read", n, f"{self.src(func)} reads files, folders or devices", [ev])
            elif parts[0] == "shutil" and parts[-1] in _SHUTIL_READS:
                self.add("file-read", n, f"{self.src(func)} reads a file (to copy or move it)", [ev])
            if qn.startswith("torch.utils.cpp_extension.") or parts[-1] in ("load_inline", "load"):
                self._check_extension_flags(n, qn)
            return
        if isinstance(func, ast.Attribute):
            name = func.attr
            recv = func.value
            ev_call = f"{self.src(recv, 40)}.{name}()"
            if name in _PATH_READ_METHODS:
                if not self._own_method(recv, n, name):
                    self.add("file-read", n, f"{ev_call} reads the file system", [ev])
            elif name in _PATH_MAYBE_METHODS:
                mode = n.args[0] if n.args else next((k.value for k in n.keywords if k.arg == "mode"), None)
                text = _str_const(mode) if name == "open" and mode is not None else None
                if text and len(text) <= 3 and set(text) <= set("rwabxt+") and set(text) & set("wax+"):
                    self.add("io-network", n, f"{ev} opens a file for writing", [ev])
                elif self._file_receiver(recv, n, name):
                    self.add("file-read", n, f"{ev_call} on a path (or an object of unknown kind) reads the file "
                             "system", [ev])

    def _check_open(self, n: ast.Call, mode_pos: int):
        """open-like calls: io-network when the mode writes, file-read when it reads or is not a literal."""
        mode = None
        if len(n.args) > mode_pos:
            mode = n.args[mode_pos]
        for kw in n.keywords:
            if kw.arg == "mode":
                mode = kw.value
        ev = self.src(n, 60)
        text = "r" if mode is None else _str_const(mode)
        if text is None:
            self.add("file-read", n, f"{ev} opens a file (its mode is not a literal: it reads, or writes)", [ev])
        elif set(text) & set("wax+"):
            self.add("io-network", n, f"{ev} opens a file for writing", [ev])
        else:
            self.add("file-read", n, f"{ev} opens a file for reading", [ev])

    def _own_method(self, recv, n, name: str) -> bool:
        """Is recv.name the candidate's own code (a method of its class, a function of its extension)?"""
        k = self.eval(recv, self.ctx_at(n))
        if isinstance(k, tuple):
            if k[0] in ("self", "inst", "cls", "super"):
                return any(name in self.methods.get(c, {}) for c in self.mro(k[1]))
            if k[0] in ("ext", "extfn", "kernel"):
                return True
        return False

    def _file_receiver(self, recv, n, name: str) -> bool:
        """Can recv.open()/.glob()/.walk() read files: a path, or an object the analysis does not know
        (not a tensor, a number or string, an nn layer, the candidate's own object or extension)."""
        if self._pathlike(recv):
            return True
        k = self.eval(recv, self.ctx_at(n))
        if k in (U, BOT):
            return True
        if isinstance(k, tuple) and k[0] in ("self", "inst", "cls", "super"):
            if any(name in self.methods.get(c, {}) for c in self.mro(k[1])):
                return False
            # a class of the candidate's that derives from something outside the file and torch.nn
            return any(self.qualname(b, None) and not (self.qualname(b, None) or "").startswith("torch.")
                       for c in self.mro(k[1]) for b in self.classes[c].bases)
        return False

    def _pathlike(self, node) -> bool:
        while True:
            if isinstance(node, ast.Call):
                qn = self.qualname(node.func, None) or ""
                if qn in _PATHLIB_CLASSES or qn.rsplit(".", 1)[0] in _PATHLIB_CLASSES:
                    return True
                if isinstance(node.func, ast.Attribute) and node.func.attr in _PATH_DERIVING:
                    node = node.func.value
                    continue
                return False
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                return self._pathlike(node.left) or self._pathlike(node.right)
            if isinstance(node, ast.Attribute) and node.attr in _PATH_DERIVING:
                node = node.value
                continue
            if isinstance(node, ast.Subscript):
                node = node.value
                continue
            return False

    def _check_extension_flags(self, n: ast.Call, qn: str):
        """Compiler flags handed to load_inline/load that read files (@file, -include) or run programs."""
        for kw in n.keywords:
            if kw.arg not in _EXTENSION_FLAG_ARGS:
                continue
            for c in ast.walk(kw.value):
                flag = _str_const(c)
                if flag is None:
                    continue
                shown = flag if len(flag) <= 50 else flag[:49] + "…"
                if _FLAG_READ_RX.search(flag.strip()):
                    self.add("file-read", c, f"compiler flag {shown!r} ({kw.arg}) reads files or runs programs",
                             [f"{kw.arg}: {shown}"])
                if _CPP_QUALIFIER_REDEFINED.search(flag):
                    self.add("cpp-system", c, f"compiler flag {shown!r} ({kw.arg}) defines CUDA's function "
                             "qualifiers away (device code compiled as host code)", [f"{kw.arg}: {shown}"])

    def _check_read_ref(self, n):
        """file-read: sys.stdin, and open/input passed around as values."""
        qn = self.qualname(n, None)
        if qn in ("sys.stdin", "sys.__stdin__"):
            self.add("file-read", n, f"{self.src(n)} reads standard input", [self.src(n)])
        elif isinstance(n, ast.Name) and n.id in ("open", "input") and self.is_builtin(n.id, None):
            p = self.parents.get(n)
            if not (isinstance(p, ast.Call) and p.func is n):
                self.add("file-read", n, f"{n.id} used as a value (to read files or standard input)", [n.id])

    def _check_path_literal(self, n: ast.Constant):
        """file-read: string literals naming /proc, /sys, /dev/, /etc, or a file-reading function."""
        value = n.value if isinstance(n.value, str) else n.value.decode("latin-1")
        if len(value) > 4096:
            return
        line = n
        parent = self.parents.get(n)
        if isinstance(parent, ast.JoinedStr):
            line = parent  # the parts of an f-string have no lines of their own before Python 3.12
        text = value.strip()
        if text.startswith("file://"):
            text = text[len("file://"):]
        shown = repr(value) if len(value) <= 50 else repr(value[:49]) + "…"
        if text.startswith("/") and "\n" not in text:
            norm = "/" + posixpath.normpath(text).lstrip("/")
            if _SYSTEM_PATH_RX.match(norm):
                self.add("file-read", line, f"{shown} names a system path (/proc, /sys, /dev, /etc)", [shown])
        elif value in _READ_NAMES:
            self.add("file-read", line, f"{shown} names a file-reading function (fetched by name)", [shown])

    # -- extension sources --------------------------------------------------------------------
    def _extension_sources(self) -> dict[int, set[str]]:
        """ids of the str constants that reach a load_inline source argument -> {"cpp", "cuda"}: through
        names (assigned anywhere), self attributes, lists, +, str.join/format, f-strings, calls and the
        returns of the file's functions. A ** argument counts as cpp_sources."""
        assigns: dict[str, list] = {}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign):
                for t in _flatten_targets(node.targets):
                    key = t.id if isinstance(t, ast.Name) else "." + t.attr if isinstance(t, ast.Attribute) else None
                    if key:
                        assigns.setdefault(key, []).append(node.value)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and node.value is not None:
                t = node.target
                key = t.id if isinstance(t, ast.Name) else "." + t.attr if isinstance(t, ast.Attribute) else None
                if key:
                    assigns.setdefault(key, []).append(node.value)
            elif isinstance(node, ast.Return) and node.value is not None:
                fn = self.enclosing_function(node)
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    assigns.setdefault(fn.name, []).append(node.value)
        out: dict[int, set[str]] = {}

        def collect(root, kind: str):
            seen: set[str] = set()
            stack = [root]
            while stack:
                x = stack.pop()
                if isinstance(x, ast.Constant):
                    if isinstance(x.value, str):
                        out.setdefault(id(x), set()).add(kind)
                    continue
                key = x.id if isinstance(x, ast.Name) else "." + x.attr if isinstance(x, ast.Attribute) else None
                if key and key not in seen:
                    seen.add(key)
                    stack.extend(assigns.get(key, []))
                if not isinstance(x, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    stack.extend(ast.iter_child_nodes(x))

        for node in ast.walk(self.tree):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name != "load_inline" and (self.qualname(f, None) or "") != "torch.utils.cpp_extension.load_inline":
                continue
            for i, a in enumerate(node.args[1:3]):
                collect(a, "cpp" if i == 0 else "cuda")
            for kw in node.keywords:
                if kw.arg in ("cpp_sources", "cuda_sources", "sycl_sources", None):
                    collect(kw.value, "cuda" if kw.arg == "cuda_sources" else "cpp")
        return out

    def _check_import(self, n):
        if isinstance(n, ast.Import):
            mods = [a.name for a in n.names]
        else:
            if n.level or not n.module:
                return
            mods = [n.module] + [f"{n.module}.{a.name}" for a in n.names]
        for m in mods:
            root = m.split(".")[0]
            if root in _CONCURRENCY_MODULES or m.startswith("torch.multiprocessing"):
                self.add("concurrency", n, f"imports {m}: threads, processes or async tasks", [f"import {m}"])
            if root in _INTROSPECTION_MODULES:
                self.add("introspection", n, f"imports {m}: reaches into the interpreter", [f"import {m}"])
            if root in _NETWORK_MODULES:
                self.add("io-network", n, f"imports {m}: subprocesses, sockets or HTTP", [f"import {m}"])
            if (m.startswith(("torch.overrides", "torch.utils._python_dispatch"))
                    or m.split(".")[-1] in ("TorchDispatchMode", "TorchFunctionMode")):
                self.add("tensor-subclass", n, f"imports {m}: PyTorch dispatch hooks", [f"import {m}"])
            if m.startswith("unittest.mock") or root == "mock":
                self.add("monkey-patch", n, f"imports {m}: patching tools", [f"import {m}"])
            if root == "runpy":
                self.add("dynamic-code", n, f"imports {m}: runs code from elsewhere", [f"import {m}"])

    def _check_try(self, n):
        fn = self.enclosing_function(n)
        if fn is not None:
            if isinstance(fn, ast.Lambda) or not self.is_kernel(fn):
                name = getattr(fn, "name", "lambda")
                owner = self.parents.get(fn)
                if isinstance(owner, ast.ClassDef):
                    name = f"{owner.name}.{name}"
                self.add("try-except", n, f"try/except in {name}: a fallback path", [f"try/except in {name}"])
            return
        for s in n.body:
            ok = isinstance(s, (ast.Import, ast.ImportFrom, ast.Pass)) or (
                isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)) or (
                isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant))
            if not ok:
                self.add("try-except", n, "module-level try/except around more than imports: a fallback path",
                         ["module-level try/except"])
                return

    def _check_class(self, n: ast.ClassDef):
        for b in n.bases:
            qn = self.qualname(b, None)
            if qn in ("torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase", "torch.nn.Parameter",
                      "torch.nn.parameter.Parameter") or (isinstance(b, ast.Name) and b.id == "Tensor"):
                self.add("tensor-subclass", n, f"class {n.name} derives from {self.src(b)}: a tensor subclass",
                         [f"class {n.name}({self.src(b)})"])
            elif qn and qn.split(".")[-1] in ("TorchDispatchMode", "TorchFunctionMode"):
                self.add("tensor-subclass", n, f"class {n.name} is a {qn.split('.')[-1]}",
                         [f"class {n.name}({self.src(b)})"])
        for s in n.body:
            if isinstance(s, ast.Assign):
                for t in s.targets:
                    if isinstance(t, ast.Name) and t.id in ("__torch_function__", "__torch_dispatch__"):
                        self.add("tensor-subclass", s, f"class {n.name} sets {t.id}", [t.id])

    def _check_call_file(self, n: ast.Call):
        func = n.func
        if isinstance(func, ast.Name) and self.is_builtin(func.id, None):
            name = func.id
            if name in ("eval", "exec", "compile", "__import__"):
                self.add("dynamic-code", n, f"{name}(...) runs code built at run time", [self.src(n, 60)])
            elif name == "getattr" and len(n.args) >= 2 and _str_const(n.args[1]) is None:
                self.add("dynamic-code", n, f"{self.src(n, 60)}: getattr with a computed name", [self.src(n, 60)])
            elif name in ("globals", "locals") or (name == "vars" and not n.args and not n.keywords):
                self.add("introspection", n, f"{name}() reaches into the interpreter", [f"{name}()"])
            elif name in ("setattr", "delattr") and n.args and self.import_rooted(n.args[0]):
                self.add("monkey-patch", n, f"{self.src(n, 60)} changes an imported module or class", [self.src(n, 60)])
            return
        if (isinstance(func, ast.Attribute) and func.attr in ("__setattr__", "__delattr__")
                and isinstance(func.value, ast.Name) and func.value.id in ("object", "type")
                and n.args and self.import_rooted(n.args[0])):
            self.add("monkey-patch", n, f"{self.src(n, 60)} changes an imported module or class", [self.src(n, 60)])
            return
        qn = self.qualname(func, None)
        if qn:
            parts = qn.split(".")
            if self._global_state_call(qn):
                self.add("global-state", n, f"{self.src(func)} changes PyTorch's global state", [self.src(func)])
            if qn in _IO_CALLS or qn.startswith(_IO_PREFIXES) or (
                    parts[0] == "shutil" and parts[-1] not in _SHUTIL_READ_ONLY):
                self.add("io-network", n, f"{self.src(func)}: file writes, processes or network", [self.src(n, 60)])
            if qn in _DYNAMIC_CALLS or qn.startswith("runpy."):
                self.add("dynamic-code", n, f"{self.src(func)} runs code built at run time", [self.src(n, 60)])
            if qn.startswith(("torch.multiprocessing.", "torch.futures.")) or qn in ("torch.jit.fork", "torch.jit.wait"):
                self.add("concurrency", n, f"{self.src(func)}: parallel tasks", [self.src(func)])
            if qn in ("os.getenv", "os.getenvb"):
                self.add("environment", n, f"{self.src(n, 60)} reads the environment", [self.src(n, 60)])
            if qn.startswith("torch.library.") and n.args:
                lib = _str_const(n.args[0]) or ""
                if lib.startswith("aten"):
                    self.add("monkey-patch", n, f"{self.src(n, 60)} registers over a PyTorch (aten) op", [self.src(n, 60)])
            if qn.startswith(("unittest.mock.patch", "mock.patch")):
                self.add("monkey-patch", n, f"{self.src(n, 60)} patches a module", [self.src(n, 60)])
            return
        if isinstance(func, ast.Attribute):
            name = func.attr
            if name in _STREAM_METHODS:
                ev = f"{self.src(func.value, 40)}.{name}()"
                self.add("streams", n, f"{ev} synchronizes or tags CUDA streams", [ev])
            elif name in ("write_text", "write_bytes", "tofile"):
                ev = f"{self.src(func.value, 40)}.{name}()"
                self.add("io-network", n, f"{ev} writes a file", [ev])
            elif name in ("update", "__setitem__", "setdefault", "pop", "__delitem__", "clear"):
                recv = func.value
                if (isinstance(recv, ast.Attribute) and recv.attr == "__dict__" and self.import_rooted(recv.value)) or (
                        isinstance(recv, ast.Call) and isinstance(recv.func, ast.Name) and recv.func.id == "vars"
                        and recv.args and self.import_rooted(recv.args[0])):
                    self.add("monkey-patch", n, f"{self.src(n, 60)} changes an imported module's namespace", [self.src(n, 60)])

    @staticmethod
    def _global_state_call(qn: str) -> bool:
        parts = qn.split(".")
        if qn in _GLOBAL_STATE_EXACT:
            return True
        if len(parts) == 2 and parts[0] == "torch" and parts[1].startswith("set_") and parts[1] not in (
                "set_grad_enabled",):
            return True
        if qn.startswith("torch.cuda.set_") and qn != "torch.cuda.set_stream":
            return True
        if qn.startswith("torch.cuda.") and parts[-1] in ("manual_seed", "manual_seed_all", "set_rng_state",
                                                           "set_rng_state_all"):
            return True
        if qn.startswith("torch._C._set_"):
            return True
        if qn.startswith("torch.backends.") and len(parts) >= 4 and parts[-1] not in _BACKEND_QUERIES:
            return True
        return False

    def _check_ref(self, n):
        if self._in_store_chain(n):
            return
        qn = self.qualname(n, None)
        if qn:
            if qn in _STREAM_QUALS:
                ev = self.src(n)
                self.add("streams", n, f"{ev} creates or switches CUDA streams/events", [ev])
            elif qn in _SYS_INTROSPECTION:
                self.add("introspection", n, f"{self.src(n)} reaches into the interpreter", [self.src(n)])
            elif qn in ("os.environ", "os.environb"):
                self._check_environ(n)
            elif qn.startswith(("torch.overrides.", "torch.utils._python_dispatch.")):
                self.add("tensor-subclass", n, f"{self.src(n)}: PyTorch dispatch hooks", [self.src(n)])
        name = n.attr if isinstance(n, ast.Attribute) else n.id
        if isinstance(n, ast.Attribute) and name in _INTROSPECTION_ATTRS:
            self.add("introspection", n, f"{self.src(n, 60)} reaches into the interpreter", [f".{name}"])
        elif isinstance(n, ast.Name) and name == "__builtins__":
            self.add("introspection", n, "__builtins__ reaches into the interpreter", ["__builtins__"])
        if name in _SUBCLASS_NAMES:
            self.add("tensor-subclass", n, f"{self.src(n, 60)}: tensor subclass or dispatch hooks", [name])

    def _check_environ(self, n):
        p = self.parents.get(n)
        if isinstance(p, ast.Subscript) and p.value is n and isinstance(p.ctx, (ast.Store, ast.Del)):
            return
        if isinstance(p, ast.Attribute) and p.value is n and p.attr in (
                "setdefault", "update", "pop", "clear", "__setitem__", "__delitem__"):
            return
        ev = self.src(p if isinstance(p, (ast.Subscript, ast.Attribute)) and p.value is n else n, 60)
        self.add("environment", n, f"{ev} reads the environment", [ev])

    def _check_store(self, n):
        if isinstance(n, ast.Assign):
            targets = n.targets
        elif isinstance(n, ast.Delete):
            targets = n.targets
        else:
            targets = [n.target]
        for t in _flatten_targets(targets):
            if not isinstance(t, (ast.Attribute, ast.Subscript)):
                continue
            ev = self.src(t, 60)
            if isinstance(t, ast.Attribute) and t.attr == "__class__":
                self.add("tensor-subclass", n, f"assigns {ev}: swaps an object's class", [ev])
                continue
            chain_has_class = False
            cur = t.value
            while isinstance(cur, (ast.Attribute, ast.Subscript)):
                if isinstance(cur, ast.Attribute) and cur.attr == "__class__":
                    chain_has_class = True
                cur = cur.value
            root = cur
            if chain_has_class or (isinstance(root, ast.Call) and isinstance(root.func, ast.Name)
                                   and root.func.id == "type"):
                self.add("monkey-patch", n, f"assigns {ev}: changes a class from outside the file", [ev])
                continue
            if not self.import_rooted(t):
                continue
            base = t.value if isinstance(t, ast.Subscript) else t
            qn = self.qualname(base, None) or ""
            if isinstance(t, ast.Subscript) and qn in ("os.environ", "os.environb"):
                continue  # setting build variables is fine
            verb = "deletes" if isinstance(n, ast.Delete) else "assigns"
            if qn.startswith(_GLOBAL_STATE_STORE_PREFIXES):
                self.add("global-state", n, f"{verb} {ev}: changes PyTorch's global state", [ev])
            else:
                self.add("monkey-patch", n, f"{verb} {ev}: changes an imported module or class", [ev])

    def _cpp_line_of(self, n: ast.Constant):
        """pos in the constant's value -> the line of the candidate file where that character stands."""
        code = n.value
        lines = None
        if n not in self._in_fstring:
            segment = ast.get_source_segment(self.source, n)
            if segment is not None:
                lines = _string_line_map(segment, n.lineno, code)
        if lines:
            last = lines[-1]
            return lambda pos: lines[pos] if 0 <= pos < len(lines) else last
        return lambda pos: n.lineno + code.count("\n", 0, pos)

    def _check_cpp(self, n: ast.Constant):
        code = n.value
        no_comments, plain, literals = _scan_cpp(code)
        line_of = self._cpp_line_of(n)

        for m in _CPP_INCLUDE.finditer(no_comments):
            header = m.group(1)
            if re.search(r"(?i)cublas|cudnn|cutlass|cufft|cusparse|cusolver", header):
                self.add("library-compute", line_of(m.start()), f"#include <{header}> in CUDA/C++ source: library compute",
                         [f"#include <{header}>"])
        plain_no_includes = re.sub(r"#\s*include[^\n]*", lambda m: " " * len(m.group(0)), plain)
        for m in _CPP_STREAMS.finditer(plain):
            self.add("streams", line_of(m.start()), f"{m.group(1)} in CUDA/C++ source creates or switches streams/events",
                     [m.group(1)])
        for rx in (_CPP_LIBRARY, _CPP_THRUST):
            for m in rx.finditer(plain_no_includes):
                self.add("library-compute", line_of(m.start()), f"{m.group(1)} in CUDA/C++ source: library compute",
                         [m.group(1)])
        for m in _CPP_NS_CALL.finditer(plain):
            ns, path, name = m.group(1), m.group(2), m.group(3)
            segs = [s for s in path.split("::") if s]
            tok = f"{ns}::{path}{name}"
            if any(s in _CPP_COMPUTE_NS for s in segs) or re.search(r"(?i)blas|dnn", name):
                bad = True
            elif segs and segs[0] in _CPP_OK_NS:
                bad = False
            elif name[:1].isupper() or name in _CPP_OK_NAMES or _CPP_OK_NAME_RX.match(name):
                bad = False
            else:
                bad = True
            if bad:
                self.add("library-compute", line_of(m.start()), f"{tok} in CUDA/C++ source: PyTorch computes it",
                         [tok])
        # the source's own device functions (an accumulator's .add(), ...): torch ops cannot run there
        defined = set()
        for m in _CPP_DEFINED.finditer(plain):
            start = max(plain.rfind(c, 0, m.start()) for c in ";{}")
            if "__device__" in plain[start + 1: m.start()]:
                defined.add(m.group(1))
        for m in _CPP_METHOD.finditer(plain):
            if m.group(1) in defined:
                continue
            tok = f".{m.group(1)}("
            self.add("library-compute", line_of(m.start()),
                     f"{tok} in CUDA/C++ source: a PyTorch tensor op computes it", [tok])
        # __device__/__global__ bodies are device code only where nvcc compiles the source (cuda_sources) and
        # the qualifiers are not defined away; g++ (cpp_sources) compiles them as host code
        device_code = self._ext_sources.get(id(n)) == {"cuda"} and not self._device_redefined
        self._check_cpp_system(code, no_comments, plain_no_includes, literals, line_of, device_code)

    def _check_cpp_system(self, code: str, no_comments: str, plain: str, literals, line_of, device_code: bool):
        """cpp-system: libc/POSIX I/O, processes, sockets, environment and library loading in host code."""
        device = _cpp_device_spans(plain) if device_code else []

        def on_device(pos: int) -> bool:
            return any(a <= pos < b for a, b in device)

        def add(pos: int, tok: str, what: str):
            self.add("cpp-system", line_of(pos), f"{tok} in CUDA/C++ source {what}", [tok])

        definitions = {m.start(1) for m in _CPP_DEFINED.finditer(plain)}
        for m in _CPP_SYSTEM_CALL_RX.finditer(plain):
            name, pos = m.group(1), m.start(1)
            if pos in definitions or on_device(pos):
                continue
            before = plain[max(0, pos - 200): pos].rstrip()
            qualified = ""
            if before.endswith(".") or before.endswith("->"):
                continue  # a member: p.read(...), f->open(...)
            if before.endswith("::"):
                q = re.search(r"(\w*)::$", before).group(1)
                if q not in ("", "std") or (q == "std" and name in _CPP_STD_OK):
                    continue  # another namespace's: Reader::read(...), std::bind(...)
                qualified = f"{q}::"
            else:
                word = re.search(r"(\w+)\s*[*&]*\s*$", before)
                if word and word.group(1) in _CPP_TYPE_WORDS:
                    if word.group(0).rstrip() == word.group(1) or re.search(r"\w\s*[*&]+$", before):
                        continue  # a declaration: `ssize_t read(int, void*, size_t);`
            add(pos, f"{qualified}{name}()", _CPP_SYSTEM_CALLS[name])
        declared = {m.group(2) for m in _CPP_DECLARED_RX.finditer(plain) if m.group(1) not in _CPP_KEYWORDS}
        for m in _CPP_SYSTEM_VALUE_RX.finditer(plain):
            name, pos = m.group(1), m.start(1)
            if name in declared and "::" not in m.group(0):
                continue  # the source's own variable
            if not on_device(pos):
                add(pos, name, f"takes {name} as a value: it {_CPP_SYSTEM_CALLS[name]}")
        for m in _CPP_DEFINE_RX.finditer(plain):
            for w in _CPP_SYSTEM_NAME_RX.finditer(m.group(0)):
                name = w.group(1)
                add(m.start() + w.start(1), name, f"names {name} in a macro: it {_CPP_SYSTEM_CALLS[name]}")
        for rx, what in _CPP_SYSTEM_TOKENS:
            for m in rx.finditer(plain):
                if not on_device(m.start()):
                    add(m.start(), " ".join(m.group(0).split()), what)
        for start, end in literals:
            text = code[start:end]
            for m in _CPP_LITERAL_RX.finditer(text):
                shown = text if len(text) <= 60 else text[:59] + "…"
                what = ("holds a system-call instruction" if m.group(0)[0] not in "/~h." else
                        "names a URL" if m.group(0).startswith("http") else
                        "embeds a file (.incbin)" if m.group(0) == ".incbin" else "names a system or home path")
                add(start + m.start(), shown, what)
                break
        for m in _CPP_INCLUDE.finditer(no_comments):
            header = m.group(1).strip()
            if header.startswith(("/", "~")) or ".." in header.replace("\\", "/").split("/"):
                add(m.start(), f"#include {header}", "includes a file outside the toolchain's headers")


def _weightish(attr: str) -> bool:
    return attr in ("weight", "bias", "running_mean", "running_var", "in_proj_weight", "in_proj_bias") or \
        attr.startswith(("weight_", "bias_")) or attr.endswith(("_weight", "_bias"))


def _run(tree: ast.Module, source: str) -> list[Finding]:
    an = _Analyzer(tree, source)
    an.solve()
    for f in an.forward_scope():
        an.check_scope(f)
    an.check_file()
    return sorted(an.findings.values(), key=lambda f: (f.line or 0, f.rule))


def _run_deep(tree: ast.Module, source: str) -> list[Finding]:
    """_run for sources nested deeper than the recursion limit allows: in a thread with a big stack."""
    out: dict = {}

    def target():
        try:
            out["findings"] = _run(tree, source)
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


def check_source(source: str, filename: str = "<candidate>") -> list[Finding]:
    """Findings of the static rules on a candidate's source (empty when it does not parse)."""
    try:
        tree = ast.parse(source, filename=filename)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []  # the evaluator reports what does not compile
    try:
        return _run(tree, source)
    except RecursionError:
        return _run_deep(tree, source)
