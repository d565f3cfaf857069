"""``file-read``, read over the host code of the whole file (not inside kernels): calls that open files for
reading (an open whose mode writes is ``io-network``), read, list or map files and folders, or read standard
input; file-reading functions passed around or fetched by name; string literals naming /proc, /sys, /dev or
/etc paths; compiler flags handed to ``load_inline``/``load`` that read files or run programs."""

from __future__ import annotations

import ast
import posixpath
import re

from .cpp_sources import CPP_QUALIFIER_REDEFINED
from .inference import Inference
from .kinds import BOT, U
from .report import Report
from .syntax import str_const

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


class FileRules:
    def __init__(self, inference: Inference, report: Report, kernel_nodes: set[int], prose: set):
        self.inf = inference
        self.program = inference.program
        self.report = report
        self.kernel_nodes = kernel_nodes  # a kernel's body is not host code
        self.prose = prose  # docstrings and other bare string statements

    def visit(self, n):
        """The rules on one node of the file's tree."""
        if id(n) in self.kernel_nodes:
            return
        if isinstance(n, ast.Call):
            self._check_call(n)
        elif isinstance(n, (ast.Attribute, ast.Name)) and isinstance(n.ctx, ast.Load):
            self._check_read_ref(n)
        elif isinstance(n, ast.Constant) and isinstance(n.value, (str, bytes)) and n not in self.prose:
            self._check_path_literal(n)

    def _read_qualname(self, n: ast.Call) -> str | None:
        qn = self.program.qualname(n.func, None)
        if qn is None:
            fk = self.inf.eval(n.func, self.inf.ctx_at(n))
            if isinstance(fk, tuple) and fk[0] == "alias":
                qn = fk[1]
        if qn and qn.split(".")[0] in ("posix", "nt", "_io"):
            qn = ("os." if qn[0] != "_" else "io.") + qn.split(".", 1)[-1]
        return qn

    def _check_call(self, n: ast.Call):
        """file-read: calls that read files, folders, devices or standard input (and io-network for an
        open whose mode writes)."""
        func = n.func
        ev = self.report.src(n, 60)
        if isinstance(func, ast.Name) and self.program.is_builtin(func.id, None):
            if func.id == "open":
                self._check_open(n, 1)
            elif func.id == "input":
                self.report.add("file-read", n, f"{ev} reads standard input", [ev])
            elif func.id == "getattr" and len(n.args) >= 2 and str_const(n.args[1]):
                name = n.args[1].value
                base = self.program.qualname(n.args[0], None)
                if name in _PATH_READ_METHODS or (base and _reads_by_name(f"{base}.{name}")) or (
                        name in _PATH_MAYBE_METHODS and self._file_receiver(n.args[0], n, name)):
                    self.report.add("file-read", n, f"{ev} fetches a file-reading function by name", [ev])
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
                    self.report.add("io-network", n, f"{ev} opens a file descriptor for writing", [ev])
                else:
                    self.report.add("file-read", n, f"{ev} opens a file descriptor", [ev])
            elif _reads_by_name(qn):
                self.report.add("file-read", n, f"{self.report.src(func)} reads files, folders or devices", [ev])
            elif parts[0] == "shutil" and parts[-1] in _SHUTIL_READS:
                self.report.add("file-read", n, f"{self.report.src(func)} reads a file (to copy or move it)", [ev])
            if qn.startswith("torch.utils.cpp_extension.") or parts[-1] in ("load_inline", "load"):
                self._check_extension_flags(n, qn)
            return
        if isinstance(func, ast.Attribute):
            name = func.attr
            recv = func.value
            ev_call = f"{self.report.src(recv, 40)}.{name}()"
            if name in _PATH_READ_METHODS:
                if not self._own_method(recv, n, name):
                    self.report.add("file-read", n, f"{ev_call} reads the file system", [ev])
            elif name in _PATH_MAYBE_METHODS:
                mode = n.args[0] if n.args else next((k.value for k in n.keywords if k.arg == "mode"), None)
                text = str_const(mode) if name == "open" and mode is not None else None
                if text and len(text) <= 3 and set(text) <= set("rwabxt+") and set(text) & set("wax+"):
                    self.report.add("io-network", n, f"{ev} opens a file for writing", [ev])
                elif self._file_receiver(recv, n, name):
                    self.report.add("file-read", n,
                                    f"{ev_call} on a path (or an object of unknown kind) reads the file system", [ev])

    def _check_open(self, n: ast.Call, mode_pos: int):
        """open-like calls: io-network when the mode writes, file-read when it reads or is not a literal."""
        mode = None
        if len(n.args) > mode_pos:
            mode = n.args[mode_pos]
        for kw in n.keywords:
            if kw.arg == "mode":
                mode = kw.value
        ev = self.report.src(n, 60)
        text = "r" if mode is None else str_const(mode)
        if text is None:
            self.report.add("file-read", n, f"{ev} opens a file (its mode is not a literal: it reads, or writes)", [ev])
        elif set(text) & set("wax+"):
            self.report.add("io-network", n, f"{ev} opens a file for writing", [ev])
        else:
            self.report.add("file-read", n, f"{ev} opens a file for reading", [ev])

    def _own_method(self, recv, n, name: str) -> bool:
        """Is recv.name the candidate's own code (a method of its class, a function of its extension)?"""
        k = self.inf.eval(recv, self.inf.ctx_at(n))
        if isinstance(k, tuple):
            if k[0] in ("self", "inst", "cls", "super"):
                return any(name in self.program.methods.get(c, {}) for c in self.program.mro(k[1]))
            if k[0] in ("ext", "extfn", "kernel"):
                return True
        return False

    def _file_receiver(self, recv, n, name: str) -> bool:
        """Can recv.open()/.glob()/.walk() read files: a path, or an object the analysis does not know
        (not a tensor, a number or string, an nn layer, the candidate's own object or extension)."""
        if self._pathlike(recv):
            return True
        k = self.inf.eval(recv, self.inf.ctx_at(n))
        if k in (U, BOT):
            return True
        if isinstance(k, tuple) and k[0] in ("self", "inst", "cls", "super"):
            if any(name in self.program.methods.get(c, {}) for c in self.program.mro(k[1])):
                return False
            # a class of the candidate's that derives from something outside the file and torch.nn
            qualname = self.program.qualname
            return any(qualname(b, None) and not (qualname(b, None) or "").startswith("torch.")
                       for c in self.program.mro(k[1]) for b in self.program.classes[c].bases)
        return False

    def _pathlike(self, node) -> bool:
        while True:
            if isinstance(node, ast.Call):
                qn = self.program.qualname(node.func, None) or ""
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
                flag = str_const(c)
                if flag is None:
                    continue
                shown = flag if len(flag) <= 50 else flag[:49] + "…"
                if _FLAG_READ_RX.search(flag.strip()):
                    self.report.add("file-read", c, f"compiler flag {shown!r} ({kw.arg}) reads files or runs programs",
                                    [f"{kw.arg}: {shown}"])
                if CPP_QUALIFIER_REDEFINED.search(flag):
                    self.report.add("cpp-system", c, f"compiler flag {shown!r} ({kw.arg}) defines CUDA's function "
                                    "qualifiers away (device code compiled as host code)", [f"{kw.arg}: {shown}"])

    def _check_read_ref(self, n):
        """file-read: sys.stdin, and open/input passed around as values."""
        qn = self.program.qualname(n, None)
        if qn in ("sys.stdin", "sys.__stdin__"):
            self.report.add("file-read", n, f"{self.report.src(n)} reads standard input", [self.report.src(n)])
        elif isinstance(n, ast.Name) and n.id in ("open", "input") and self.program.is_builtin(n.id, None):
            p = self.program.parents.get(n)
            if not (isinstance(p, ast.Call) and p.func is n):
                self.report.add("file-read", n, f"{n.id} used as a value (to read files or standard input)", [n.id])

    def _check_path_literal(self, n: ast.Constant):
        """file-read: string literals naming /proc, /sys, /dev/, /etc, or a file-reading function."""
        value = n.value if isinstance(n.value, str) else n.value.decode("latin-1")
        if len(value) > 4096:
            return
        line = n
        parent = self.program.parents.get(n)
        if isinstance(parent, ast.JoinedStr):
            line = parent  # the parts of an f-string have no lines of their own before Python 3.12
        text = value.strip()
        if text.startswith("file://"):
            text = text[len("file://"):]
        shown = repr(value) if len(value) <= 50 else repr(value[:49]) + "…"
        if text.startswith("/") and "\n" not in text:
            norm = "/" + posixpath.normpath(text).lstrip("/")
            if _SYSTEM_PATH_RX.match(norm):
                self.report.add("file-read", line, f"{shown} names a system path (/proc, /sys, /dev, /etc)", [shown])
        elif value in _READ_NAMES:
            self.report.add("file-read", line, f"{shown} names a file-reading function (fetched by name)", [shown])



def _reads_by_name(qn: str) -> bool:
    parts = qn.split(".")
    return (qn in _READ_CALLS or qn.startswith(_READ_PREFIXES)
            or (parts[0] == "torch" and parts[-1] == "from_file")
            or (parts[0] == "pathlib" and (parts[-1] in _PATH_READ_METHODS or parts[-1] in _PATH_MAYBE_METHODS)))
