"""Rules on what the file's host Python does, read over the whole file (``__init__`` and module level
included): ``try-except``, ``concurrency``, ``streams`` (the Python API), ``monkey-patch``, ``global-state``,
``dynamic-code``, ``introspection``, ``tensor-subclass``, ``io-network`` and ``environment``."""

from __future__ import annotations

import ast

from .program import Program
from .report import Report
from .syntax import chain_root, flatten_targets, str_const
from .torch_names import STREAM_METHODS, SUBCLASS_NAMES

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
_DYNAMIC_CALLS = frozenset({
    "builtins.eval", "builtins.exec", "builtins.compile", "builtins.__import__", "types.FunctionType",
    "types.CodeType", "types.LambdaType", "marshal.loads",
})


class HostRules:
    def __init__(self, program: Program, report: Report):
        self.program = program
        self.report = report

    def visit(self, n):
        """The rules on one node of the file's tree."""
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            self._check_import(n)
        elif isinstance(n, (ast.Try, ast.TryStar)) and n.handlers:
            self._check_try(n)
        elif isinstance(n, (ast.With, ast.AsyncWith)):
            self._check_with(n)
        if isinstance(n, ast.AsyncFunctionDef):
            self.report.add("concurrency", n, f"async def {n.name}: asynchronous code", [f"async def {n.name}"])
        elif isinstance(n, (ast.Await, ast.AsyncFor)):
            self.report.add("concurrency", n, "await/async for: asynchronous code", [self.report.src(n, 40)])
        if isinstance(n, ast.ClassDef):
            self._check_class(n)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in ("__torch_function__",
                                                                                   "__torch_dispatch__"):
            self.report.add("tensor-subclass", n, f"defines {n.name}: a hook on every PyTorch call", [n.name])
        elif isinstance(n, ast.Call):
            self._check_call(n)
        if isinstance(n, (ast.Attribute, ast.Name)) and isinstance(n.ctx, ast.Load):
            self._check_ref(n)
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            self._check_store(n)

    def import_rooted(self, node) -> bool:
        root = chain_root(node)
        if isinstance(root, ast.Call) and isinstance(root.func, ast.Name) and root.func.id == "vars" and root.args:
            return self.import_rooted(root.args[0])
        return isinstance(root, ast.Name) and isinstance(self.program.lookup(root.id, None), tuple) and \
            self.program.lookup(root.id, None)[0] == "alias"

    def _in_store_chain(self, node) -> bool:
        cur = node
        while True:
            p = self.program.parents.get(cur)
            if isinstance(p, (ast.Attribute, ast.Subscript)) and p.value is cur:
                cur = p
                continue
            break
        return isinstance(getattr(cur, "ctx", None), (ast.Store, ast.Del))

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
                self.report.add("concurrency", n, f"imports {m}: threads, processes or async tasks", [f"import {m}"])
            if root in _INTROSPECTION_MODULES:
                self.report.add("introspection", n, f"imports {m}: reaches into the interpreter", [f"import {m}"])
            if root in _NETWORK_MODULES:
                self.report.add("io-network", n, f"imports {m}: subprocesses, sockets or HTTP", [f"import {m}"])
            if (m.startswith(("torch.overrides", "torch.utils._python_dispatch"))
                    or m.split(".")[-1] in ("TorchDispatchMode", "TorchFunctionMode")):
                self.report.add("tensor-subclass", n, f"imports {m}: PyTorch dispatch hooks", [f"import {m}"])
            if m.startswith("unittest.mock") or root == "mock":
                self.report.add("monkey-patch", n, f"imports {m}: patching tools", [f"import {m}"])
            if root == "runpy":
                self.report.add("dynamic-code", n, f"imports {m}: runs code from elsewhere", [f"import {m}"])

    def _check_try(self, n):
        fn = self.program.enclosing_function(n)
        if fn is not None:
            if isinstance(fn, ast.Lambda) or not self.program.is_kernel(fn):
                name = getattr(fn, "name", "lambda")
                owner = self.program.parents.get(fn)
                if isinstance(owner, ast.ClassDef):
                    name = f"{owner.name}.{name}"
                self.report.add("try-except", n, f"try/except in {name}: a fallback path", [f"try/except in {name}"])
            return
        for s in n.body:
            ok = isinstance(s, (ast.Import, ast.ImportFrom, ast.Pass)) or (
                isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)) or (
                isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant))
            if not ok:
                self.report.add("try-except", n, "module-level try/except around more than imports: a fallback path",
                                ["module-level try/except"])
                return

    def _check_with(self, n):
        for item in n.items:
            e = item.context_expr
            if isinstance(e, ast.Call) and self.program.qualname(e.func, None) == "contextlib.suppress":
                self.report.add("try-except", n, f"{self.report.src(e)} swallows exceptions (a try/except in disguise)",
                                [self.report.src(e)])
        if isinstance(n, ast.AsyncWith):
            self.report.add("concurrency", n, "async with: asynchronous code", ["async with"])

    def _check_class(self, n: ast.ClassDef):
        for b in n.bases:
            qn = self.program.qualname(b, None)
            if qn in ("torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase", "torch.nn.Parameter",
                      "torch.nn.parameter.Parameter") or (isinstance(b, ast.Name) and b.id == "Tensor"):
                self.report.add("tensor-subclass", n,
                                f"class {n.name} derives from {self.report.src(b)}: a tensor subclass",
                                [f"class {n.name}({self.report.src(b)})"])
            elif qn and qn.split(".")[-1] in ("TorchDispatchMode", "TorchFunctionMode"):
                self.report.add("tensor-subclass", n, f"class {n.name} is a {qn.split('.')[-1]}",
                                [f"class {n.name}({self.report.src(b)})"])
        for s in n.body:
            if isinstance(s, ast.Assign):
                for t in s.targets:
                    if isinstance(t, ast.Name) and t.id in ("__torch_function__", "__torch_dispatch__"):
                        self.report.add("tensor-subclass", s, f"class {n.name} sets {t.id}", [t.id])

    def _check_call(self, n: ast.Call):
        func = n.func
        add, src = self.report.add, self.report.src
        if isinstance(func, ast.Name) and self.program.is_builtin(func.id, None):
            name = func.id
            if name in ("eval", "exec", "compile", "__import__"):
                add("dynamic-code", n, f"{name}(...) runs code built at run time", [src(n, 60)])
            elif name == "getattr" and len(n.args) >= 2 and str_const(n.args[1]) is None:
                add("dynamic-code", n, f"{src(n, 60)}: getattr with a computed name", [src(n, 60)])
            elif name in ("globals", "locals") or (name == "vars" and not n.args and not n.keywords):
                add("introspection", n, f"{name}() reaches into the interpreter", [f"{name}()"])
            elif name in ("setattr", "delattr") and n.args and self.import_rooted(n.args[0]):
                add("monkey-patch", n, f"{src(n, 60)} changes an imported module or class", [src(n, 60)])
            return
        if (isinstance(func, ast.Attribute) and func.attr in ("__setattr__", "__delattr__")
                and isinstance(func.value, ast.Name) and func.value.id in ("object", "type")
                and n.args and self.import_rooted(n.args[0])):
            add("monkey-patch", n, f"{src(n, 60)} changes an imported module or class", [src(n, 60)])
            return
        qn = self.program.qualname(func, None)
        if qn:
            parts = qn.split(".")
            if _global_state_call(qn):
                add("global-state", n, f"{src(func)} changes PyTorch's global state", [src(func)])
            if qn in _IO_CALLS or qn.startswith(_IO_PREFIXES) or (
                    parts[0] == "shutil" and parts[-1] not in _SHUTIL_READ_ONLY):
                add("io-network", n, f"{src(func)}: file writes, processes or network", [src(n, 60)])
            if qn in _DYNAMIC_CALLS or qn.startswith("runpy."):
                add("dynamic-code", n, f"{src(func)} runs code built at run time", [src(n, 60)])
            if qn.startswith(("torch.multiprocessing.", "torch.futures.")) or qn in ("torch.jit.fork", "torch.jit.wait"):
                add("concurrency", n, f"{src(func)}: parallel tasks", [src(func)])
            if qn in ("os.getenv", "os.getenvb"):
                add("environment", n, f"{src(n, 60)} reads the environment", [src(n, 60)])
            if qn.startswith("torch.library.") and n.args:
                lib = str_const(n.args[0]) or ""
                if lib.startswith("aten"):
                    add("monkey-patch", n, f"{src(n, 60)} registers over a PyTorch (aten) op", [src(n, 60)])
            if qn.startswith(("unittest.mock.patch", "mock.patch")):
                add("monkey-patch", n, f"{src(n, 60)} patches a module", [src(n, 60)])
            return
        if isinstance(func, ast.Attribute):
            name = func.attr
            if name in STREAM_METHODS:
                ev = f"{src(func.value, 40)}.{name}()"
                add("streams", n, f"{ev} synchronizes or tags CUDA streams", [ev])
            elif name in ("write_text", "write_bytes", "tofile"):
                ev = f"{src(func.value, 40)}.{name}()"
                add("io-network", n, f"{ev} writes a file", [ev])
            elif name in ("update", "__setitem__", "setdefault", "pop", "__delitem__", "clear"):
                recv = func.value
                if (isinstance(recv, ast.Attribute) and recv.attr == "__dict__" and self.import_rooted(recv.value)) or (
                        isinstance(recv, ast.Call) and isinstance(recv.func, ast.Name) and recv.func.id == "vars"
                        and recv.args and self.import_rooted(recv.args[0])):
                    add("monkey-patch", n, f"{src(n, 60)} changes an imported module's namespace", [src(n, 60)])

    def _check_ref(self, n):
        if self._in_store_chain(n):
            return
        add, src = self.report.add, self.report.src
        qn = self.program.qualname(n, None)
        if qn:
            if qn in _STREAM_QUALS:
                ev = src(n)
                add("streams", n, f"{ev} creates or switches CUDA streams/events", [ev])
            elif qn in _SYS_INTROSPECTION:
                add("introspection", n, f"{src(n)} reaches into the interpreter", [src(n)])
            elif qn in ("os.environ", "os.environb"):
                self._check_environ(n)
            elif qn.startswith(("torch.overrides.", "torch.utils._python_dispatch.")):
                add("tensor-subclass", n, f"{src(n)}: PyTorch dispatch hooks", [src(n)])
        name = n.attr if isinstance(n, ast.Attribute) else n.id
        if isinstance(n, ast.Attribute) and name in _INTROSPECTION_ATTRS:
            add("introspection", n, f"{src(n, 60)} reaches into the interpreter", [f".{name}"])
        elif isinstance(n, ast.Name) and name == "__builtins__":
            add("introspection", n, "__builtins__ reaches into the interpreter", ["__builtins__"])
        if name in SUBCLASS_NAMES:
            add("tensor-subclass", n, f"{src(n, 60)}: tensor subclass or dispatch hooks", [name])

    def _check_environ(self, n):
        p = self.program.parents.get(n)
        if isinstance(p, ast.Subscript) and p.value is n and isinstance(p.ctx, (ast.Store, ast.Del)):
            return
        if isinstance(p, ast.Attribute) and p.value is n and p.attr in (
                "setdefault", "update", "pop", "clear", "__setitem__", "__delitem__"):
            return
        ev = self.report.src(p if isinstance(p, (ast.Subscript, ast.Attribute)) and p.value is n else n, 60)
        self.report.add("environment", n, f"{ev} reads the environment", [ev])

    def _check_store(self, n):
        if isinstance(n, ast.Assign):
            targets = n.targets
        elif isinstance(n, ast.Delete):
            targets = n.targets
        else:
            targets = [n.target]
        for t in flatten_targets(targets):
            if not isinstance(t, (ast.Attribute, ast.Subscript)):
                continue
            ev = self.report.src(t, 60)
            if isinstance(t, ast.Attribute) and t.attr == "__class__":
                self.report.add("tensor-subclass", n, f"assigns {ev}: swaps an object's class", [ev])
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
                self.report.add("monkey-patch", n, f"assigns {ev}: changes a class from outside the file", [ev])
                continue
            if not self.import_rooted(t):
                continue
            base = t.value if isinstance(t, ast.Subscript) else t
            qn = self.program.qualname(base, None) or ""
            if isinstance(t, ast.Subscript) and qn in ("os.environ", "os.environb"):
                continue  # setting build variables is fine
            verb = "deletes" if isinstance(n, ast.Delete) else "assigns"
            if qn.startswith(_GLOBAL_STATE_STORE_PREFIXES):
                self.report.add("global-state", n, f"{verb} {ev}: changes PyTorch's global state", [ev])
            else:
                self.report.add("monkey-patch", n, f"{verb} {ev}: changes an imported module or class", [ev])


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
