"""The scan of one C++/CUDA source string for ``library-compute`` (cuBLAS, cuDNN, CUTLASS, thrust, ATen ops),
``streams`` (creating or switching CUDA streams and events) and ``cpp-system`` (libc/POSIX I/O, processes,
sockets, the environment, library loading, system paths), on the text with its comments and literals blanked
out (``cpp_lex``)."""

from __future__ import annotations

import re

from .cpp_lex import CPP_DEFINED, blank_cpp, device_spans
from .report import Report

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
_CPP_COMPUTE_NS = frozenset({"native", "linalg", "fft", "special", "nn", "functional", "blas", "sparse",
                             "_ops", "cudnn", "miopen"})
_CPP_OK_NS = frozenset({"cuda", "indexing", "detail", "autograd", "jit", "cpu", "mps", "xpu"})

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

# a word before `name(` that makes it a declaration (`ssize_t read(int, void*, size_t);`)
_CPP_TYPE_WORDS = frozenset({
    "void", "int", "long", "short", "char", "float", "double", "bool", "auto", "unsigned", "signed", "size_t",
    "ssize_t", "int64_t", "int32_t", "uint64_t", "uint32_t", "Tensor", "__device__", "__host__", "__global__",
    "__forceinline__", "inline", "static", "constexpr",
})


def check(code: str, line_of, device_code: bool, report: Report):
    """The findings in one source; line_of(pos) is the file's line of the character at pos, device_code says
    whether __device__/__global__ bodies are device code (not read for cpp-system)."""
    no_comments, plain, literals = blank_cpp(code)

    for m in _CPP_INCLUDE.finditer(no_comments):
        header = m.group(1)
        if re.search(r"(?i)cublas|cudnn|cutlass|cufft|cusparse|cusolver", header):
            report.add("library-compute", line_of(m.start()),
                       f"#include <{header}> in CUDA/C++ source: library compute",
                       [f"#include <{header}>"])
    plain_no_includes = re.sub(r"#\s*include[^\n]*", lambda m: " " * len(m.group(0)), plain)
    for m in _CPP_STREAMS.finditer(plain):
        report.add("streams", line_of(m.start()), f"{m.group(1)} in CUDA/C++ source creates or switches streams/events",
                   [m.group(1)])
    for rx in (_CPP_LIBRARY, _CPP_THRUST):
        for m in rx.finditer(plain_no_includes):
            report.add("library-compute", line_of(m.start()), f"{m.group(1)} in CUDA/C++ source: library compute",
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
            report.add("library-compute", line_of(m.start()), f"{tok} in CUDA/C++ source: PyTorch computes it",
                       [tok])
    # the source's own device functions (an accumulator's .add(), ...): torch ops cannot run there
    defined = set()
    for m in CPP_DEFINED.finditer(plain):
        start = max(plain.rfind(c, 0, m.start()) for c in ";{}")
        if "__device__" in plain[start + 1: m.start()]:
            defined.add(m.group(1))
    for m in _CPP_METHOD.finditer(plain):
        if m.group(1) in defined:
            continue
        tok = f".{m.group(1)}("
        report.add("library-compute", line_of(m.start()),
                   f"{tok} in CUDA/C++ source: a PyTorch tensor op computes it", [tok])
    _check_system(code, no_comments, plain_no_includes, literals, line_of, device_code, report)


def _check_system(code: str, no_comments: str, plain: str, literals, line_of, device_code: bool, report: Report):
    """cpp-system: libc/POSIX I/O, processes, sockets, environment and library loading in host code."""
    device = device_spans(plain) if device_code else []

    def on_device(pos: int) -> bool:
        return any(a <= pos < b for a, b in device)

    def add(pos: int, tok: str, what: str):
        report.add("cpp-system", line_of(pos), f"{tok} in CUDA/C++ source {what}", [tok])

    definitions = {m.start(1) for m in CPP_DEFINED.finditer(plain)}
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
