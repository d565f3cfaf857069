"""Whole-file rules on host Python: try-except, concurrency, streams, monkey-patch, global-state,
dynamic-code, introspection, tensor-subclass, io-network and environment."""

import pytest

from kfoundry.guard import check_source
from tests.guard.static.helpers import assert_clean, assert_fires, model, src


# -- try-except -----------------------------------------------------------------------------------

def test_try_except_in_forward_fires():
    assert_fires(model("""
        y = torch.empty_like(x)
        try:  # <-
            _launch(x, y)
        except Exception:
            pass
        return y
    """), "try-except")


def test_try_except_anywhere_in_host_code_fires():
    assert_fires(model("return x", init="""
        try:  # <-
            self.ok = True
        except RuntimeError:
            self.ok = False
    """), "try-except")
    assert_fires(src("""
        from torch.utils.cpp_extension import load_inline

        try:  # <-
            _ext = load_inline(name="e", cpp_sources="", functions=["f"])
        except Exception:
            _ext = None
    """), "try-except")
    assert_fires(src("""
        import contextlib


        class ModelNew(nn.Module):
            def forward(self, x):
                with contextlib.suppress(Exception):  # <-
                    _launch(x, x)
                return x
    """), "try-except")


def test_module_level_try_import_and_try_finally_are_fine():
    assert_clean(src("""
        try:
            import triton
            HAS_TRITON = True
        except ImportError:
            triton = None
            HAS_TRITON = False


        class ModelNew(nn.Module):
            def forward(self, x):
                y = torch.empty_like(x)
                try:
                    _launch(x, y)
                finally:
                    pass
                return y
    """))


# -- concurrency ----------------------------------------------------------------------------------

@pytest.mark.parametrize("snippet", [
    "import threading  # <-",
    "from concurrent.futures import ThreadPoolExecutor  # <-",
    "import multiprocessing as mp  # <-",
    "import asyncio  # <-",
    "async def _go():  # <-\n    return 1",
    "def f():\n    return torch.multiprocessing.Pool(2)  # <-",
])
def test_concurrency_fires(snippet):
    assert_fires(src(snippet), "concurrency")


def test_concurrency_does_not_fire_on_ordinary_imports():
    assert_clean(src("import functools\nimport itertools\nimport time\n"), "concurrency")


# -- streams --------------------------------------------------------------------------------------

STREAM_CHEATS = {
    "new_stream": model("""
        side = torch.cuda.Stream()  # <-
        return x
    """),
    "switch_stream": model("""
        y = torch.empty_like(x)
        with torch.cuda.stream(self.side):  # <-
            _launch(x, y)
        return y
    """, init="self.side = None"),
    "event": model("""
        done = torch.cuda.Event()  # <-
        return x
    """),
    "record_stream": model("""
        x.record_stream(torch.cuda.current_stream())  # <-
        return x
    """),
    "wait_stream": model("""
        self.side.wait_stream(torch.cuda.current_stream())  # <-
        return x
    """, init="self.side = None"),
    "set_stream": src("torch.cuda.set_stream(torch.cuda.Stream())  # <-"),
    "imported_stream_class": src("""
        from torch.cuda import Stream

        _side = Stream()  # <-
    """),
    "cuda_stream_create": src('''
        SRC = r"""
        #include <torch/extension.h>
        void run() {
            cudaStream_t s;
            cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);  // <-
        }
        """
    '''),
    "stream_from_pool": src('''
        SRC = r"""
        #include <torch/extension.h>
        void run() {
            auto s = at::cuda::getStreamFromPool();  // <-
        }
        """
    '''),
    "stream_guard": src('''
        SRC = r"""
        #include <c10/cuda/CUDAGuard.h>
        void run(c10::cuda::CUDAStream s) {
            c10::cuda::CUDAStreamGuard guard(s);  // <-
        }
        """
    '''),
    "event_record": src('''
        SRC = r"""
        __global__ void k() {}
        void run(cudaEvent_t e) {
            k<<<1, 1>>>();
            cudaEventRecord(e, 0);  // <-
        }
        """
    '''),
}


@pytest.mark.parametrize("name", sorted(STREAM_CHEATS))
def test_streams_fire(name):
    assert_fires(STREAM_CHEATS[name], "streams")


def test_current_stream_is_fine_in_python_and_cuda():
    assert_clean(model("""
        stream = torch.cuda.current_stream()
        handle = stream.cuda_stream
        y = torch.empty_like(x)
        _launch(x, y)
        return y
    """), "streams")
    assert_clean(src('''
        SRC = r"""
        #include <torch/extension.h>
        #include <ATen/cuda/CUDAContext.h>
        __global__ void k(const float* x, float* y, long n) {
            long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
            if (i < n) y[i] = x[i];
        }
        torch::Tensor run(torch::Tensor x) {
            auto y = torch::empty_like(x);
            auto stream = at::cuda::getCurrentCUDAStream();
            auto other = c10::cuda::getCurrentCUDAStream();
            k<<<(x.numel() + 255) / 256, 256, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
            return y;
        }
        """
    '''))


# -- monkey-patch ---------------------------------------------------------------------------------

@pytest.mark.parametrize("snippet", [
    "F.gelu = lambda x: x  # <-",
    "torch.Tensor.__matmul__ = lambda a, b: a  # <-",
    "nn.Linear.forward = lambda self, x: x  # <-",
    "import time\ntime.perf_counter = lambda: 0.0  # <-",
    "torch.cuda.Event.elapsed_time = lambda a, b: 1.0  # <-",
    'setattr(torch, "matmul", lambda a, b: a)  # <-',
    'delattr(F, "gelu")  # <-',
    "del torch.matmul  # <-",
    "torch.add += 1  # <-",
    'torch.__dict__["softmax"] = None  # <-',
    "def patch():\n    torch.softmax = None  # <-",
    'torch.library.impl("aten::add.Tensor", "CPU")(lambda a, b: a)  # <-',
])
def test_monkey_patch_fires(snippet):
    assert_fires(src(snippet), "monkey-patch")


def test_monkey_patch_does_not_fire_on_own_objects_and_build_variables():
    assert_clean(src("""
        os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"


        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.w = nn.Parameter(torch.ones(4))


        ModelNew.extra = 1
        setattr(ModelNew, "other", 2)
    """), "monkey-patch")


# -- global-state ---------------------------------------------------------------------------------

@pytest.mark.parametrize("snippet", [
    "torch.backends.cuda.matmul.allow_tf32 = True  # <-",
    "torch.backends.cudnn.benchmark = True  # <-",
    'torch.set_float32_matmul_precision("high")  # <-',
    "torch.set_num_threads(1)  # <-",
    "torch.set_default_dtype(torch.float64)  # <-",
    "torch.set_flush_denormal(True)  # <-",
    "torch.use_deterministic_algorithms(True)  # <-",
    "torch.manual_seed(0)  # <-",
    "torch.cuda.manual_seed(0)  # <-",
])
def test_global_state_fires(snippet):
    finding = assert_fires(src(snippet), "global-state")
    assert not [f for f in check_source(src(snippet)) if f.rule == "monkey-patch"]
    assert finding.evidence


def test_global_state_does_not_fire_on_grad_mode_and_reads():
    assert_clean(model("""
        torch.set_grad_enabled(False)
        with torch.no_grad():
            tf32 = torch.backends.cuda.matmul.allow_tf32
            ok = torch.backends.cudnn.is_available()
        y = torch.empty_like(x)
        _launch(x, y)
        return y
    """))


# -- dynamic-code ---------------------------------------------------------------------------------

@pytest.mark.parametrize("snippet", [
    'y = eval("1 + 1")  # <-',
    'exec("x = 1")  # <-',
    'code = compile("1", "<s>", "eval")  # <-',
    'name = "mat" + "mul"\nop = getattr(torch, name)  # <-',
    'mod = __import__("torch")  # <-',
])
def test_dynamic_code_fires(snippet):
    assert_fires(src(snippet), "dynamic-code")


def test_dynamic_code_does_not_fire_on_literal_getattr_and_other_compiles():
    assert_clean(src("""
        import re

        _pattern = re.compile("[a-z]+")
        _compiled = torch.compile


        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.weight = nn.Parameter(torch.ones(4))

            def forward(self, x):
                w = getattr(self, "weight")
                _launch(x, w)
                return x
    """), "dynamic-code")


# -- introspection --------------------------------------------------------------------------------

@pytest.mark.parametrize("snippet", [
    "import gc  # <-",
    "import inspect  # <-",
    "import ctypes  # <-",
    "import importlib  # <-",
    "from importlib import import_module  # <-",
    "import builtins  # <-",
    "import sys\nmods = sys.modules  # <-",
    "import sys\nframe = sys._getframe(1)  # <-",
    "from sys import modules\nm = modules  # <-",
    "g = globals()  # <-",
    "def f():\n    return locals()  # <-",
    "v = vars()  # <-",
    "b = __builtins__  # <-",
    "def f():\n    return f.__globals__  # <-",
])
def test_introspection_fires(snippet):
    assert_fires(src(snippet), "introspection")


def test_introspection_does_not_fire_on_sys_version_and_vars_of_self():
    assert_clean(model("""
        fields = vars(self)
        y = torch.empty_like(x)
        _launch(x, y)
        return y
    """, extra="import sys\n\nPY = sys.version_info"))


# -- tensor-subclass ------------------------------------------------------------------------------

@pytest.mark.parametrize("snippet", [
    "class Fake(torch.Tensor):  # <-\n    pass",
    "from torch import Tensor\n\n\nclass Fake(Tensor):  # <-\n    pass",
    "class Hook:\n    def __torch_function__(self, func, types, args=(), kwargs=None):  # <-\n        return 0",
    "class Hook:\n    __torch_dispatch__ = None  # <-",
    "from torch.utils._python_dispatch import TorchDispatchMode  # <-",
    "def wrap(x):\n    return torch.Tensor._make_subclass(object, x)  # <-",
    "def relabel(x, cls):\n    x.__class__ = cls  # <-",
    "import torch.overrides  # <-",
])
def test_tensor_subclass_fires(snippet):
    assert_fires(src(snippet), "tensor-subclass")


def test_tensor_subclass_does_not_fire_on_isinstance_and_modules():
    assert_clean(model("""
        assert isinstance(x, torch.Tensor) and torch.is_tensor(x)
        y = torch.empty_like(x)
        _launch(x, y)
        return y
    """))


# -- io-network -----------------------------------------------------------------------------------

@pytest.mark.parametrize("snippet", [
    'open("out.txt", "w").write("x")  # <-',
    'with open("log.txt", mode="a") as f:  # <-\n    pass',
    'torch.save(torch.ones(1), "t.pt")  # <-',
    "import subprocess  # <-",
    "import socket  # <-",
    "import requests  # <-",
    "import urllib.request  # <-",
    'os.system("ls")  # <-',
    'os.popen("ls")  # <-',
    'os.execv("/bin/ls", ["ls"])  # <-',
    'from pathlib import Path\nPath("p.txt").write_text("x")  # <-',
    'import numpy as np\nnp.save("a.npy", [1])  # <-',
    'import pickle\npickle.dump(1, open("p.bin", "rb"))  # <-',
    'import shutil\nshutil.copy("a", "b")  # <-',
    'os.remove("a")  # <-',
])
def test_io_network_fires(snippet):
    assert_fires(src(snippet), "io-network")


def test_io_network_does_not_fire_on_reads():
    assert_clean(src("""
        from pathlib import Path

        _a = open("table.txt").read()
        _b = open("table.bin", "rb").read()
        _c = open("table.txt", mode="r").read()
        _d = Path("table.txt").read_text()
    """), "io-network")


# -- environment ----------------------------------------------------------------------------------

@pytest.mark.parametrize("snippet", [
    'mode = os.environ["KF_MODE"]  # <-',
    'mode = os.environ.get("KF_MODE")  # <-',
    'mode = os.getenv("KF_MODE")  # <-',
    "names = [k for k in os.environ]  # <-",
    'timed = "KF_TIMING" in os.environ  # <-',
    'from os import environ\nmode = environ.get("X")  # <-',
    "env = dict(os.environ)  # <-",
])
def test_environment_fires(snippet):
    assert_fires(src(snippet), "environment")


def test_setting_build_variables_is_fine():
    assert_clean(src("""
        from torch.utils.cpp_extension import load_inline

        os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"
        os.environ.setdefault("MAX_JOBS", "4")
        os.environ.update({"CXX": "g++"})
        _ext = load_inline(name="e", cpp_sources="", functions=["f"])
    """))
