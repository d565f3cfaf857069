"""The static guard (kfoundry.guard.static.check_source): for every rule, cheating snippets that fire it
at the right line and legitimate neighbours that do not. Pure AST: nothing here imports or runs a
candidate.

Snippets mark the line a finding must point at with `# <-` (`// <-` inside C++ sources)."""

import ast
import textwrap
from pathlib import Path

import pytest

from kfoundry.guard import Finding, check_source
from kfoundry.guard.findings import RULES

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"

HEAD = '''\
import math
import os
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask, other=0.0) * 2.0, mask=mask)


def _launch(x, y):
    n = x.numel()
    _kernel[(triton.cdiv(n, 256),)](x, y, n, BLOCK=256)
'''


def src(body: str) -> str:
    """HEAD (imports, a kernel, a launch helper) followed by the dedented body."""
    return HEAD + "\n\n" + textwrap.dedent(body).strip("\n") + "\n"


def model(forward: str, init: str = "", extra: str = "") -> str:
    """HEAD, then `extra`, then a ModelNew with the given __init__ additions and forward body."""
    init_lines = textwrap.indent(textwrap.dedent(init).strip("\n"), " " * 8) if init.strip() else ""
    fwd_lines = textwrap.indent(textwrap.dedent(forward).strip("\n"), " " * 8)
    text = textwrap.dedent(extra).strip("\n") + "\n\n\n" if extra.strip() else ""
    text += "class ModelNew(nn.Module):\n    def __init__(self, scale=2.0):\n        super().__init__()\n"
    text += "        self.scale = scale\n" + (init_lines + "\n" if init_lines else "")
    text += "\n    def forward(self, x):\n" + fwd_lines + "\n"
    return src(text)


def marked_line(source: str) -> int:
    lines = [i for i, line in enumerate(source.splitlines(), 1) if "# <-" in line or "// <-" in line]
    assert len(lines) == 1, "mark exactly one line with # <- (or // <- in C++)"
    return lines[0]


def render(findings: list[Finding]) -> str:
    return "\n".join(f.render() + f"  {f.evidence}" for f in findings) or "(no findings)"


def assert_fires(source: str, rule: str) -> Finding:
    assert rule in RULES
    findings = check_source(source)
    line = marked_line(source)
    hits = [f for f in findings if f.rule == rule and f.line == line]
    assert hits, f"expected [{rule}] at line {line}; got:\n{render(findings)}\n---\n{source}"
    hit = hits[0]
    assert hit.message and hit.evidence and all(isinstance(e, str) and e for e in hit.evidence)
    return hit


def assert_clean(source: str, rule: str | None = None):
    findings = [f for f in check_source(source) if rule is None or f.rule == rule]
    assert not findings, f"expected no {'findings' if rule is None else rule}; got:\n{render(findings)}\n---\n{source}"


# -- basics -------------------------------------------------------------------------------------

def test_syntax_error_is_not_the_guards_business():
    assert check_source("def broken(:\n    pass\n") == []
    assert check_source((FIXTURES / "candidates" / "syntax_error.py").read_text()) == []


def test_a_plain_triton_candidate_has_no_findings():
    assert_clean(model("""
        x = x.contiguous()
        y = torch.empty_like(x)
        _launch(x, y)
        return y
    """))


def test_findings_carry_rule_message_line_and_evidence():
    source = model("return torch.matmul(x, x)  # <-")
    finding = assert_fires(source, "torch-compute")
    assert "torch.matmul" in finding.message and finding.evidence[0] == "torch.matmul"
    assert finding.render().startswith(f"[torch-compute] line {marked_line(source)}: ")


def test_the_guard_imports_no_torch():
    """The parent runs the static guard without importing torch: check the modules' own imports."""
    guard = REPO / "src" / "kfoundry" / "guard"
    for name in ("__init__.py", "static.py", "findings.py", "allowlist.py"):
        tree = ast.parse((guard / name).read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not any(m.split(".")[0] in ("torch", "triton", "numpy") for m in imported), (name, imported)


# -- torch-compute --------------------------------------------------------------------------------

TORCH_COMPUTE_CHEATS = {
    "torch_function": model("return torch.matmul(x, x.t())  # <-"),
    "functional_alias": model("return F.gelu(x)  # <-"),
    "from_torch_nn_import_functional": src("""
        from torch.nn import functional as G


        class ModelNew(nn.Module):
            def forward(self, x):
                return G.softmax(x, dim=-1)  # <-
    """),
    "import_torch_as_T": src("""
        import torch as T


        class ModelNew(nn.Module):
            def forward(self, x):
                return T.relu(x)  # <-
    """),
    "from_torch_import_matmul": src("""
        from torch import matmul


        class ModelNew(nn.Module):
            def forward(self, x):
                return matmul(x, x)  # <-
    """),
    "module_level_alias": src("""
        mm = torch.mm


        class ModelNew(nn.Module):
            def forward(self, x):
                return mm(x, x)  # <-
    """),
    "linalg": model("return torch.linalg.norm(x, dim=-1)  # <-"),
    "special": model("return torch.special.erf(x)  # <-"),
    "fft": model("return torch.fft.fft(x)  # <-"),
    "tensor_sum": model("return x.sum(dim=-1)  # <-"),
    "tensor_exp_after_view": model("""
        y = x.contiguous().view(-1)
        return y.exp()  # <-
    """),
    "tensor_max": model("return x.max(dim=1)  # <-"),
    "tensor_clamp": model("return x.clamp(0.0, 1.0)  # <-"),
    "tensor_dunder_matmul": model("return x.__matmul__(x)  # <-"),
    "tensor_add_inplace": model("""
        y = torch.empty_like(x)
        y.add_(x)  # <-
        return y
    """),
    "matmul_operator_with_weight": model("""
        w = self.linear.weight
        return x @ w.t()  # <-
    """, init="self.linear = nn.Linear(4, 4)"),
    "operator_on_parameter": model("""
        y = torch.empty_like(x)
        _launch(x, y)
        return y + self.bias  # <-
    """, init="self.bias = nn.Parameter(torch.zeros(4))"),
    "operator_on_buffer": model("""
        y = torch.empty_like(x)
        _launch(x, y)
        return y * self.coef  # <-
    """, init='self.register_buffer("coef", torch.ones(4))'),
    "scale_by_python_number": model("""
        y = torch.empty_like(x)
        _launch(x, y)
        return y * self.scale  # <-
    """),
    "augmented_assignment": model("""
        y = torch.empty_like(x)
        _launch(x, y)
        y += x  # <-
        return y
    """),
    "unary_minus": model("return -x  # <-"),
    "builtin_abs_on_tensor": model("return abs(x)  # <-"),
    "boolean_mask": model("""
        keep = x > 0  # <-
        return keep
    """),
    "helper_function_reached_from_forward": src("""
        def _post(y):
            return y.mean(dim=-1)  # <-


        class ModelNew(nn.Module):
            def forward(self, x):
                y = torch.empty_like(x)
                _launch(x, y)
                return _post(y)
    """),
    "helper_method_reached_from_forward": src("""
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.shift = 1.0

            def _finish(self, y):
                return y + self.shift  # <-

            def forward(self, x):
                y = torch.empty_like(x)
                _launch(x, y)
                return self._finish(y)
    """),
    "transitively_reached": src("""
        def _inner(t):
            return torch.sigmoid(t)  # <-


        def _outer(t):
            return _inner(t)


        class ModelNew(nn.Module):
            def forward(self, x):
                return _outer(x)
    """),
    "static_method_on_helper_class": src("""
        class Ops:
            @staticmethod
            def finish(y):
                return torch.tanh(y)  # <-


        class ModelNew(nn.Module):
            def forward(self, x):
                return Ops.finish(x)
    """),
    "autograd_function_apply": src("""
        class Fn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.relu()  # <-


        class ModelNew(nn.Module):
            def forward(self, x):
                return Fn.apply(x)
    """),
    "function_kept_on_self": model("return self.act(x)  # <-", init="self.act = F.gelu"),
    "extension_result": src("""
        from torch.utils.cpp_extension import load_inline

        _ext = load_inline(name="e", cpp_sources="", cuda_sources="", functions=["f"])


        class ModelNew(nn.Module):
            def forward(self, x):
                y = _ext.f(x)
                return y * 2  # <-
    """),
}


@pytest.mark.parametrize("name", sorted(TORCH_COMPUTE_CHEATS))
def test_torch_compute_fires(name):
    assert_fires(TORCH_COMPUTE_CHEATS[name], "torch-compute")


TORCH_COMPUTE_LEGIT = {
    "shape_arithmetic": model("""
        total = x.shape[0] * x.shape[1]
        rows = x.size(0) * x.size(1) // 2
        n_rows = x.shape[0]
        half = n_rows // 2 + 1
        y = torch.empty(total, device=x.device, dtype=x.dtype)
        _launch(x, y)
        return y.view(x.shape[0], -1)
    """),
    "unpacked_shape_and_cdiv_grid": model("""
        B, N = x.shape
        y = torch.empty_like(x)
        grid = (triton.cdiv(B * N, 1024),)
        _kernel[grid](x, y, B * N, BLOCK=1024)
        return y
    """),
    "allocation_views_casts_fills": model("""
        x2 = x.contiguous().view(-1)
        x16 = x.to(torch.float16).contiguous()
        n = x2.numel()
        neg = torch.full((n,), -float("inf"), device=x.device)
        acc = torch.zeros((n,), dtype=torch.float32, device=x.device)
        acc.fill_(0)
        acc.zero_()
        out = torch.empty_like(x16).reshape(x.shape).permute(1, 0).contiguous()
        _launch(x2, acc)
        return out.to(x.dtype), neg
    """),
    "python_math_on_ints": model("""
        d = x.shape[-1]
        scale = 1.0 / math.sqrt(d)
        block = max(triton.next_power_of_2(d), 16)
        warps = min(block // 256, 8)
        num_warps = 4 if block <= 2048 else 8
        y = torch.empty_like(x)
        _kernel[(x.shape[0],)](x, y, d, BLOCK=block, num_warps=num_warps)
        return y
    """),
    "builtins_and_literals": model("""
        names = "{}-{}".format(1, 2).split("-")
        idx = [1, 2, 3].index(2)
        cfg = {"a": 1}.get("a")
        total = sum([1, 2, 3]) + len(names) + idx + cfg
        y = torch.empty_like(x)
        _launch(x, y)
        return y
    """),
    "weight_and_bias_read_for_the_kernel": model("""
        w, b = self.linear.weight, self.linear.bias
        M, K = x.shape
        N = w.shape[0]
        y = torch.empty((M, N), device=x.device, dtype=x.dtype)
        _launch(w.contiguous(), b.contiguous())
        return y
    """, init="self.linear = nn.Linear(4, 4)"),
    "folding_in_init": src("""
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = nn.Linear(4, 4)
                self.scale_folded = self.linear.weight * 2
                self.w_t = self.linear.weight.t().contiguous() @ torch.eye(4)
                self._fold()

            def _fold(self):
                self.bias2 = torch.relu(self.linear.bias) + 1

            def forward(self, x):
                y = torch.empty_like(x)
                _launch(x, self.scale_folded)
                return y
    """),
    "current_stream_and_cuda_queries": model("""
        stream = torch.cuda.current_stream() if x.is_cuda else None
        ok = torch.cuda.is_available() and x.dtype == torch.float32
        y = torch.empty_like(x)
        _launch(x, y)
        if stream is not None:
            stream.synchronize()
        return y
    """),
    "unreachable_reference_function": src("""
        def reference(x):
            return torch.softmax(x, dim=-1)


        class ModelNew(nn.Module):
            def forward(self, x):
                y = torch.empty_like(x)
                _launch(x, y)
                return y
    """),
    "tl_ops_in_autotuned_kernel_and_jit_helper": src("""
        @triton.jit
        def _fma(a, b, c):
            return a * b + c


        @triton.autotune(configs=[triton.Config({"BM": 32}, num_warps=4)], key=["M"])
        @triton.jit
        def _mm(a_ptr, b_ptr, c_ptr, M, BM: tl.constexpr):
            r = tl.arange(0, BM)
            a = tl.load(a_ptr + r[:, None] * BM + r[None, :])
            b = tl.load(b_ptr + r[:, None] * BM + r[None, :])
            acc = tl.zeros((BM, BM), dtype=tl.float32)
            acc += tl.dot(a, b)
            acc = _fma(acc, 2.0, 1.0)
            tl.store(c_ptr + r[:, None] * BM + r[None, :], tl.sum(acc, axis=0)[None, :] + acc)


        class ModelNew(nn.Module):
            def forward(self, x):
                c = torch.empty_like(x)
                _mm[lambda meta: (triton.cdiv(x.shape[0], meta["BM"]),)](x, x, c, x.shape[0])
                return c
    """),
    "from_triton_import_jit": src("""
        from triton import jit


        @jit
        def _k(x_ptr, n):
            x = tl.load(x_ptr + tl.arange(0, 16))
            tl.store(x_ptr + tl.arange(0, 16), x * x + 1)


        class ModelNew(nn.Module):
            def forward(self, x):
                _k[(1,)](x, x.numel())
                return x
    """),
    "comparisons_on_shapes_and_none": model("""
        bias = self.bias if self.bias is not None else None
        assert x.dim() == 2 and x.shape[1] == 4 and x.is_contiguous()
        if x.numel() == 0 or x.data_ptr() % 16 != 0:
            raise ValueError("unaligned")
        y = torch.empty_like(x)
        _launch(x, y)
        return y
    """, init="self.bias = None"),
    "triton_testing_helpers_and_ints": model("""
        n = int(x.numel())
        blocks = triton.cdiv(n, 128) * 2 - 1
        y = x.new_empty(x.shape)
        _launch(x, y)
        return y.view_as(x)
    """),
}


@pytest.mark.parametrize("name", sorted(TORCH_COMPUTE_LEGIT))
def test_torch_compute_does_not_fire_on_legit_host_code(name):
    assert_clean(TORCH_COMPUTE_LEGIT[name])


def test_torch_compute_evidence_names_the_operator_and_method():
    finding = assert_fires(model("""
        w = self.linear.weight
        return x @ w  # <-
    """, init="self.linear = nn.Linear(4, 4)"), "torch-compute")
    assert finding.evidence == ["x @ w"]
    assert assert_fires(model("return x.sum()  # <-"), "torch-compute").evidence == ["x.sum()"]
    assert "F.gelu" in assert_fires(model("return F.gelu(x)  # <-"), "torch-compute").message


# -- nn-compute-layer -----------------------------------------------------------------------------

NN_CHEATS = {
    "submodule_call": model("return self.conv(x)  # <-", init="self.conv = nn.Conv2d(3, 8, 3)"),
    "activation_submodule": model("""
        y = torch.empty_like(x)
        _launch(x, y)
        return self.act(y)  # <-
    """, init="self.act = nn.GELU()"),
    "inline_layer": model("return nn.ReLU()(x)  # <-"),
    "inline_full_path_layer": model("return torch.nn.Softmax(dim=1)(x)  # <-"),
    "sequential": model("return self.body(x)  # <-", init="self.body = nn.Sequential(nn.Linear(4, 4), nn.ReLU())"),
    "module_list_loop": model("""
        for layer in self.layers:
            x = layer(x)  # <-
        return x
    """, init="self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])"),
    "module_list_index": model("return self.layers[0](x)  # <-",
                               init="self.layers = nn.ModuleList([nn.Linear(4, 4)])"),
    "explicit_forward": model("return self.linear.forward(x)  # <-", init="self.linear = nn.Linear(4, 4)"),
    "local_subclass_without_forward": src("""
        class MyLinear(nn.Linear):
            pass


        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = MyLinear(4, 4)

            def forward(self, x):
                return self.proj(x)  # <-
    """),
    "super_forward_of_a_layer": src("""
        class ModelNew(nn.Linear):
            def forward(self, x):
                return super().forward(x)  # <-
    """),
}


@pytest.mark.parametrize("name", sorted(NN_CHEATS))
def test_nn_compute_layer_fires(name):
    assert_fires(NN_CHEATS[name], "nn-compute-layer")


def test_nn_layer_read_only_for_weight_and_bias_is_fine():
    assert_clean(model("""
        w, b = self.linear.weight, self.linear.bias
        y = torch.empty((x.shape[0], w.shape[0]), device=x.device, dtype=x.dtype)
        _launch(w, b)
        eps = self.norm.eps
        return y
    """, init="self.linear = nn.Linear(4, 4)\nself.norm = nn.LayerNorm(4)\nself.ident = nn.Identity()"))
    assert_clean(model("return self.ident(x)", init="self.ident = nn.Identity()"))


def test_local_module_is_followed_not_flagged():
    source = src("""
        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = 2.0

            def forward(self, x):
                y = torch.empty_like(x)
                _launch(x, y)
                return y


        class Leaky(nn.Module):
            def forward(self, x):
                return x * 0.5  # <-


        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.block = Block()
                self.leaky = Leaky()

            def forward(self, x):
                return self.leaky(self.block(x))
    """)
    findings = check_source(source)
    assert not [f for f in findings if f.rule == "nn-compute-layer"], render(findings)
    assert_fires(source, "torch-compute")  # Leaky.forward is reached through self.leaky(...)


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


# -- library-compute ------------------------------------------------------------------------------

def _cuda(body: str) -> str:
    return src('SRC = r"""\n#include <torch/extension.h>\n' + textwrap.dedent(body).strip("\n") + '\n"""\n')


LIBRARY_CHEATS = {
    "cublas_call": _cuda("""
        torch::Tensor run(torch::Tensor a, torch::Tensor b) {
            auto c = torch::empty({a.size(0), b.size(1)}, a.options());
            cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, nullptr, nullptr, 1, nullptr, 1, nullptr, nullptr, 1);  // <-
            return c;
        }
    """),
    "cudnn_include": _cuda("""
        #include <cudnn.h>  // <-
    """),
    "cutlass": _cuda("""
        using Gemm = cutlass::gemm::device::Gemm<float, cutlass::layout::RowMajor>;  // <-
    """),
    "at_matmul": _cuda("""
        torch::Tensor run(torch::Tensor a, torch::Tensor b) {
            return at::matmul(a, b);  // <-
        }
    """),
    "torch_relu": _cuda("""
        torch::Tensor run(torch::Tensor a) {
            return torch::relu(a);  // <-
        }
    """),
    "tensor_method_in_cpp": _cuda("""
        torch::Tensor run(torch::Tensor a, torch::Tensor b) {
            return a.matmul(b);  // <-
        }
    """),
    "aten_native": _cuda("""
        torch::Tensor run(torch::Tensor a) {
            return at::native::softmax(a, 1, false);  // <-
        }
    """),
    "own_host_function_named_like_the_op": _cuda("""
        torch::Tensor matmul(torch::Tensor a, torch::Tensor b) {
            return a.matmul(b);  // <-
        }
    """),
    "torch_nn_functional": _cuda("""
        torch::Tensor run(torch::Tensor a) {
            return torch::nn::functional::gelu(a);  // <-
        }
    """),
}


@pytest.mark.parametrize("name", sorted(LIBRARY_CHEATS))
def test_library_compute_fires(name):
    assert_fires(LIBRARY_CHEATS[name], "library-compute")


def test_library_compute_does_not_fire_on_allocation_query_and_prose():
    assert_clean(src('''
        """A kernel that is faster than cuBLAS (the docstring may say so) and uses at::matmul nowhere."""
        SRC = r"""
        #include <torch/extension.h>
        // unlike cublasSgemm, this kernel fuses the epilogue; at::matmul is the reference
        /* cudnn would need a workspace */
        __global__ void k(const float* x, float* y, long n) {
            long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
            if (i < n) y[i] = fmaxf(x[i], 0.0f);
        }
        torch::Tensor run(torch::Tensor x) {
            TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "no at::matmul fallback here");
            auto xc = x.contiguous();
            auto y = torch::empty_like(xc);
            auto z = torch::zeros({xc.size(0)}, xc.options().dtype(torch::kFloat32));
            auto w = at::empty({4}, xc.options());
            long n = xc.numel();
            int64_t s0 = xc.stride(0);
            auto stream = at::cuda::getCurrentCUDAStream();
            k<<<(n + 255) / 256, 256, 0, stream>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
            return y;
        }
        """
        CPP = "torch::Tensor run(torch::Tensor x);"
        ACC = r"""
        #include <torch/extension.h>
        struct Acc {
            float s = 0.f;
            __device__ void add(float v) { s += v; }
            __device__ float max(float a, float b) const { return a > b ? a : b; }
        };
        __global__ void k(const float* x, float* y) { Acc acc; acc.add(x[0]); y[0] = acc.max(acc.s, 0.f); }
        void launch(torch::Tensor x, torch::Tensor y) {
            at::parallel_for(0, 1, 1, [&](int64_t b, int64_t e) {});
            k<<<1, 1>>>(x.data_ptr<float>(), y.data_ptr<float>());
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


# -- file-read ------------------------------------------------------------------------------------

FILE_READ_CHEATS = [
    'data = open("table.txt").read()  # <-',
    'data = open("table.bin", "rb").read()  # <-',
    'data = open("table.txt", mode="r").read()  # <-',
    'def load(p, mode):\n    return open(p, mode)  # <-',
    'import io\ndata = io.open("table.txt").read()  # <-',
    'f = os.fdopen(3)  # <-',
    'fd = os.open("table.txt", os.O_RDONLY)  # <-',
    'chunk = os.read(0, 10)  # <-',
    'names = os.listdir(".")  # <-',
    'entries = list(os.scandir("."))  # <-',
    'tree = list(os.walk("."))  # <-',
    'info = os.stat("table.txt")  # <-',
    'import glob\nfiles = glob.glob("*.pt")  # <-',
    'import glob\nfiles = list(glob.iglob("*.pt"))  # <-',
    'from pathlib import Path\ntext = Path("table.txt").read_text()  # <-',
    'import pathlib\nraw = pathlib.Path("table.bin").read_bytes()  # <-',
    'from pathlib import Path\nwith Path("table.txt").open() as f:  # <-\n    pass',
    'from pathlib import Path\nwith (Path("cache") / "t.txt").open("rb") as f:  # <-\n    pass',
    'from pathlib import Path\nkids = list(Path(".").iterdir())  # <-',
    'from pathlib import Path\npts = list(Path(".").glob("*.pt"))  # <-',
    'from pathlib import Path\npts = list(Path(".").rglob("*.pt"))  # <-',
    'def scan(folder):\n    return folder.read_bytes()  # <-',
    'def scan(folder):\n    return list(folder.glob("*"))  # <-',
    'import numpy as np\na = np.fromfile("a.bin")  # <-',
    'import numpy as np\na = np.load("a.npy")  # <-',
    'import numpy\na = numpy.memmap("a.bin", mode="r")  # <-',
    'w = torch.load("w.pt")  # <-',
    't = torch.from_file("t.bin", size=4)  # <-',
    't = torch.UntypedStorage.from_file("t.bin", False, 4)  # <-',
    'import mmap\nm = mmap.mmap(3, 4096)  # <-',
    'import linecache\nline = linecache.getline("kernel.py", 1)  # <-',
    'import shutil\nshutil.copyfile("a", "b")  # <-',
    'import shutil\nshutil.move("a", "b")  # <-',
    'from os import listdir\nnames = listdir(".")  # <-',
    'def peek():\n    o = os\n    return o.listdir(".")  # <-',
    'import posix\nnames = posix.listdir(".")  # <-',
    'import sys\nline = sys.stdin.readline()  # <-',
    'answer = input()  # <-',
    'files = list(map(open, ["a", "b"]))  # <-',
    'from pathlib import Path\nread = getattr(Path("t"), "read_text")  # <-',
    'entries = getattr(os, "listdir")(".")  # <-',
    'METHOD = "read_bytes"  # <-',
    'PROC = "/proc/self/environ"  # <-',
    'path = f"/proc/{os.getppid()}/environ"  # <-',
    'path = os.path.join("/proc", str(os.getppid()), "environ")  # <-',
    'SYS = "/sys/class/net"  # <-',
    'DEV = "/dev/nvidia0"  # <-',
    'ETC = "/etc/passwd"  # <-',
    'SNEAKY = "//proc/./self/status"  # <-',
    'URL = "file:///etc/hosts"  # <-',
    'RAW = b"/proc/self/environ"  # <-',
    'from torch.utils.cpp_extension import load\n_ext = load(name="e", sources=["k.cpp"])  # <-',
    ('from torch.utils.cpp_extension import load_inline\n'
     '_ext = load_inline(name="e", cpp_sources="", functions=["f"],\n'
     '                  extra_cflags=["-O3", "@/tmp/flags.txt"])  # <-'),
    ('from torch.utils.cpp_extension import load_inline\n'
     '_ext = load_inline(name="e", cpp_sources="", functions=["f"],\n'
     '                  extra_cflags=["-include", "secrets.h"])  # <-'),
]


@pytest.mark.parametrize("snippet", FILE_READ_CHEATS)
def test_file_read_fires(snippet):
    finding = assert_fires(src(snippet), "file-read")
    assert "instead" in finding.message and "forward's arguments" in finding.message
    assert finding.advice == RULES["file-read"][1]


def test_file_read_fires_in_forward_and_init_and_names_the_call():
    source = model("""
        y = torch.empty_like(x)
        _launch(x, y)
        return y
    """, init="""
        from pathlib import Path
        self.key = Path(f"/proc/{os.getppid()}/environ").read_bytes()  # <-
    """)
    finding = assert_fires(source, "file-read")
    assert finding.evidence[0] == 'Path(f"/proc/{os.getppid()}/environ").read_bytes()'
    assert "'/proc/'" in finding.evidence  # the path literal, merged into the same line's finding
    source = model("""
        with open("expected.txt") as table:  # <-
            table.read()
        y = torch.empty_like(x)
        _launch(x, y)
        return y
    """)
    assert assert_fires(source, "file-read").evidence == ['open("expected.txt")']


def test_an_open_that_writes_is_io_network_only_and_one_that_reads_file_read_only():
    for snippet in ('open("out.txt", "w")  # <-', 'open("out.txt", mode="a")  # <-', 'open("log.txt", "r+")  # <-',
                    'os.open("out.txt", os.O_WRONLY | os.O_CREAT)  # <-',
                    'from pathlib import Path\nPath("out.txt").open("w")  # <-'):
        assert_fires(src(snippet), "io-network")
        assert_clean(src(snippet), "file-read")
    for snippet in ('open("in.txt")  # <-', 'open("in.txt", "rb")  # <-', 'os.open("in.txt", os.O_RDONLY)  # <-',
                    'from pathlib import Path\nPath("in.txt").open()  # <-'):
        assert_fires(src(snippet), "file-read")
        assert_clean(src(snippet), "io-network")


def test_file_read_does_not_fire_on_names_views_own_objects_and_imports():
    assert_clean(src('''
        """Reads nothing: not /proc/self/environ, not the disk (a docstring is prose)."""
        import glob
        import io
        import linecache
        import mmap
        import shutil
        from pathlib import Path

        import numpy as np
        from torch.utils.cpp_extension import load_inline

        HERE = os.path.dirname(os.path.abspath(__file__))
        NAMES = ["/process", "/system", "/etcetera", "/devices", "proc/self", "read_block", "open"]
        _ext = load_inline(name="kf_e", cpp_sources="torch::Tensor run(torch::Tensor x);", cuda_sources="",
                           functions=["run"], extra_cflags=["-O3"], extra_cuda_cflags=["--use_fast_math", "-lineinfo"],
                           extra_ldflags=["-lcuda"], build_directory=os.path.join(HERE, "build"))


        @triton.jit
        def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            where = "/proc"  # a kernel is not host code
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


        class _Launcher:
            def __init__(self, block):
                self.block = block

            def open(self, count):
                return (triton.cdiv(count, self.block),)

            def read_bytes(self):
                return self.block * 4


        class ModelNew(nn.Module):
            def __init__(self, scale=2.0):
                super().__init__()
                self.read_scale = scale
                self.launcher = _Launcher(256)
                self.mode = "rb"

            def forward(self, x):
                flat = x.contiguous().view(-1)
                y = torch.empty_like(flat)
                open_count = flat.numel()
                reader = self.launcher.read_bytes()
                _copy[self.launcher.open(open_count)](flat, y, open_count, BLOCK=self.launcher.block)
                out = _ext.run(y)
                return out.view(x.shape)
    '''), "file-read")


def test_writes_are_still_io_network():
    assert_clean(src('from pathlib import Path\nPath("o.txt").write_text("x")'), "file-read")
    assert_fires(src('from pathlib import Path\nPath("o.txt").write_text("x")  # <-'), "io-network")


# -- cpp-system -----------------------------------------------------------------------------------

CPP_SYSTEM_CHEATS = {
    "fopen": _cuda("""
        int64_t leak() {
            FILE* f = fopen("/proc/self/environ", "rb");  // <-
            return f != nullptr;
        }
    """),
    "std_fopen": _cuda("""
        int64_t leak() { auto* f = std::fopen("data.bin", "rb"); return f != nullptr; }  // <-
    """),
    "freopen": _cuda("""
        void leak() { freopen("data.txt", "r", stdin); }  // <-
    """),
    "posix_open": _cuda("""
        int leak(const char* p) { return open(p, 0); }  // <-
    """),
    "global_open": _cuda("""
        int leak(const char* p) { return ::open(p, 0); }  // <-
    """),
    "openat": _cuda("""
        int leak(const char* p) { return openat(-100, p, 0); }  // <-
    """),
    "creat": _cuda("""
        int leak(const char* p) { return creat(p, 0644); }  // <-
    """),
    "free_read": _cuda("""
        long leak(int fd, char* b) {
            return read(fd, b, 16);  // <-
        }
    """),
    "pread": _cuda("""
        long leak(int fd, char* b) { return pread(fd, b, 16, 0); }  // <-
    """),
    "free_write": _cuda("""
        long leak(int fd) { return write(fd, "x", 1); }  // <-
    """),
    "opendir": _cuda("""
        void* leak() { return opendir("."); }  // <-
    """),
    "readdir": _cuda("""
        void leak(DIR* d) { while (readdir(d)) {} }  // <-
    """),
    "scandir": _cuda("""
        int leak(dirent*** out) { return scandir(".", out, nullptr, nullptr); }  // <-
    """),
    "stat": _cuda("""
        int leak(struct stat* st) { return stat("data.bin", st); }  // <-
    """),
    "lstat": _cuda("""
        int leak(struct stat* st) { return lstat("data.bin", st); }  // <-
    """),
    "fstat": _cuda("""
        int leak(int fd, struct stat* st) { return fstat(fd, st); }  // <-
    """),
    "system": _cuda("""
        void leak() { system("nvidia-smi -lgc 2100"); }  // <-
    """),
    "std_system": _cuda("""
        void leak() { std::system("id"); }  // <-
    """),
    "popen": _cuda("""
        void leak() { auto* p = popen("id", "r"); }  // <-
    """),
    "execl": _cuda("""
        void leak() { execl("/bin/sh", "sh", nullptr); }  // <-
    """),
    "execvp": _cuda("""
        void leak(char** argv) { execvp("sh", argv); }  // <-
    """),
    "execve": _cuda("""
        void leak(char** argv, char** env) { execve("/bin/sh", argv, env); }  // <-
    """),
    "fork": _cuda("""
        int leak() { return fork(); }  // <-
    """),
    "vfork": _cuda("""
        int leak() { return vfork(); }  // <-
    """),
    "clone": _cuda("""
        int leak(int (*fn)(void*), void* stack) { return clone(fn, stack, 0, nullptr); }  // <-
    """),
    "posix_spawn": _cuda("""
        int leak(pid_t* pid, char** av, char** ev) { return posix_spawn(pid, "sh", nullptr, nullptr, av, ev); }  // <-
    """),
    "socket": _cuda("""
        int leak() { return socket(2, 1, 0); }  // <-
    """),
    "connect": _cuda("""
        int leak(int s, const void* a) { return connect(s, (const struct sockaddr*) a, 16); }  // <-
    """),
    "bind": _cuda("""
        int leak(int s, const void* a) { return bind(s, (const struct sockaddr*) a, 16); }  // <-
    """),
    "getenv": _cuda("""
        bool timed() { return getenv("KFOUNDRY_WORKER_DEVICE") != nullptr; }  // <-
    """),
    "std_getenv": _cuda("""
        bool timed() { return std::getenv("KFOUNDRY_WORKER_DEVICE") != nullptr; }  // <-
    """),
    "secure_getenv": _cuda("""
        bool timed() { return secure_getenv("HOME") != nullptr; }  // <-
    """),
    "environ": _cuda("""
        extern char** environ;  // <-
    """),
    "dlopen": _cuda("""
        void* leak() { return dlopen("libcuda.so", 2); }  // <-
    """),
    "dlsym": _cuda("""
        void* leak(void* h) { return dlsym(h, "cuLaunchKernel"); }  // <-
    """),
    "mmap": _cuda("""
        void* leak(int fd) { return mmap(nullptr, 4096, 1, 1, fd, 0); }  // <-
    """),
    "ptrace": _cuda("""
        long leak(int pid) { return ptrace(16, pid, nullptr, nullptr); }  // <-
    """),
    "syscall": _cuda("""
        long leak() { return syscall(39); }  // <-
    """),
    "ifstream": _cuda("""
        void leak() { std::ifstream in("data.txt"); }  // <-
    """),
    "ofstream": _cuda("""
        void leak() { std::ofstream out("cache.json"); }  // <-
    """),
    "fstream": _cuda("""
        void leak() { std::fstream io("cache.json"); }  // <-
    """),
    "file_pointer": _cuda("""
        void leak(FILE *f) {}  // <-
    """),
    "function_pointer": _cuda("""
        auto opener = &popen;  // <-
    """),
    "macro": _cuda("""
        #define OPEN_IT fopen  // <-
    """),
    "proc_literal": _cuda("""
        const char* where = "/proc/self/status";  // <-
    """),
    "sys_literal": _cuda("""
        const char* where = "/sys/class/net";  // <-
    """),
    "dev_literal": _cuda("""
        const char* where = "/dev/shm/out";  // <-
    """),
    "etc_literal": _cuda("""
        const char* where = "/etc/hosts";  // <-
    """),
    "tmp_literal": _cuda("""
        const char* where = "/tmp/kfoundry-cache";  // <-
    """),
    "raw_string_literal": _cuda("""
        const char* where = R"(/proc/1/environ)";  // <-
    """),
    "absolute_include": _cuda("""
        #include "/proc/self/environ"  // <-
    """),
    "raw_syscall_asm": _cuda("""
        long leak() { long r; asm volatile("syscall" : "=a"(r) : "a"(39)); return r; }  // <-
    """),
    "python_from_cpp": _cuda("""
        void leak() { pybind11::module_::import("os"); }  // <-
    """),
    "qualifiers_defined_away": _cuda("""
        #define __device__  // <-
    """),
    "token_pasting": _cuda("""
        #define CAT(a, b) a##b  // <-
    """),
    "multi_line_raw_string_does_not_hide_code": _cuda("""
        const char* banner = R"(
        a "quoted" word
        )";
        int leak() { return system("id"); }  // <-
    """),
    "digit_separator_does_not_hide_code": _cuda("""
        long big = 1'000'000; int leak() { return system("id"); } long small = 1'0;  // <-
    """),
    "source_without_markers_passed_to_load_inline": src('''
        from torch.utils.cpp_extension import load_inline

        CPP = """
        int f() {
            return system("id");  // <-
        }
        """
        _ext = load_inline(name="e", cpp_sources=[CPP], functions=["f"])
    '''),
    "device_function_in_cpp_sources_is_host_code": src('''
        from torch.utils.cpp_extension import load_inline

        CPP = r"""
        #include <cuda_runtime.h>
        __device__ int f(const char* p) {
            return fopen(p, "r") != nullptr;  // <-
        }
        """
        _ext = load_inline(name="e", cpp_sources=CPP, functions=["f"])
    '''),
}


@pytest.mark.parametrize("name", sorted(CPP_SYSTEM_CHEATS))
def test_cpp_system_fires(name):
    finding = assert_fires(CPP_SYSTEM_CHEATS[name], "cpp-system")
    assert "CUDA/C++ source" in finding.message and "instead" in finding.message


def test_cpp_system_lines_follow_escapes_line_continuations_and_concatenation():
    # the value's "\n" escapes are no lines of the file: every finding is on the literal's own line
    source = src('CPP = "#include <torch/extension.h>\\nint f() {\\n  return system(\\"id\\"); }\\n"  # <-')
    assert_fires(source, "cpp-system")
    assert [f.line for f in check_source(source) if f.rule == "cpp-system"] == [marked_line(source)]
    source = src('''
        CPP = ("#include <torch/extension.h>\\n" "int f() {"
               " return 0; }\\n"
               "int g() {\\n return system(\\"id\\"); }\\n")  # <-
    ''')
    assert_fires(source, "cpp-system")
    source = src('''
        CPP = "#include <torch/extension.h>\\n\\
        int f() { return 0; }\\n\\
        int g() { return fork(); }\\n"  # <-
    ''')
    assert_fires(source, "cpp-system")


def test_cpp_system_does_not_fire_on_members_own_names_device_code_and_prose():
    assert_clean(src('''
        from torch.utils.cpp_extension import load_inline

        CUDA = r"""
        #include <torch/extension.h>
        #include <cstdio>
        #include <fstream>
        // unlike a version that would fopen() a cache or getenv() a flag, this one only computes
        /* system("...") is not called here either; "/proc" in a comment is prose */
        struct Cursor { const float* read; float* write; long open; int stat; };
        struct Reader {
            const float* p;
            __host__ __device__ float read(int i) const { return p[i]; }
        };
        __device__ __forceinline__ float read(const float* p, int i) { return __ldg(p + i); }
        __device__ float load_twice(const float* p, int i) { return read(p, i) + read(p, i); }
        __global__ void read_kernel(const float* x, float* y, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = read(x, i);
            if (i == 0) printf("read_kernel: %d elements\\n", n);
        }
        static long read_block(const Cursor& c, long i) { return c.read[i] > 0.f ? 1 : 0; }
        torch::Tensor open_close(torch::Tensor x, bool write) {
            TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "x must be a contiguous CUDA tensor");
            auto y = at::empty_like(x);
            Cursor c{x.data_ptr<float>(), y.data_ptr<float>(), 0, 0};
            Cursor* p = &c;
            p->write = c.write;
            Reader r{c.read};
            long total = 1'000'000;
            auto bound = std::bind(read_block, c, 0L);
            int n = x.numel();
            read_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
            cudaMemcpy(y.data_ptr<float>(), x.data_ptr<float>(), 0, cudaMemcpyDeviceToDevice);
            use(x, write);
            return y;
        }
        """
        CPP = "torch::Tensor open_close(torch::Tensor x, bool write);"
        _ext = load_inline(name="kf_e", cpp_sources=CPP, cuda_sources=CUDA, functions=["open_close"],
                           extra_cuda_cflags=["-O3", "--use_fast_math"])
    '''), "cpp-system")
    # a source of the candidate's own with struct fields and helpers named like libc, built with g++
    assert_clean(src('''
        from torch.utils.cpp_extension import load_inline

        CPP = r"""
        struct Span { long read; long write; };
        struct Reader { long block; long read(long n) const { return (n + block - 1) / block; } };
        static Span read_block(long n, long b) { Reader r{b}; Span s; s.read = n; s.write = r.read(n); return s; }
        long blocks(long n, long block) { Span s = read_block(n, block); const Span* p = &s; return p->write; }
        """
        _ext = load_inline(name="kf_e", cpp_sources=CPP, functions=["blocks"])
    '''))


# -- stateful-forward -----------------------------------------------------------------------------

STATEFUL_CHEATS = {
    "self_attribute": model("""
        y = torch.empty_like(x)
        _launch(x, y)
        self.last = y  # <-
        return y
    """),
    "lazy_creation_is_still_state": model("""
        if self.buf is None:
            self.buf = torch.empty_like(x)  # <-
        _launch(x, self.buf)
        return self.buf
    """, init="self.buf = None"),
    "subscript_store_on_self": model("""
        y = torch.empty_like(x)
        _launch(x, y)
        self.cache[x.data_ptr()] = y  # <-
        return y
    """, init="self.cache = {}"),
    "append_to_self_container": model("""
        y = torch.empty_like(x)
        _launch(x, y)
        self.seen.append(y)  # <-
        return y
    """, init="self.seen = []"),
    "counter": model("""
        self.calls += 1  # <-
        return x
    """, init="self.calls = 0"),
    "setattr_self": model("""
        setattr(self, "out", x)  # <-
        return x
    """),
    "object_setattr_self": model("""
        object.__setattr__(self, "out", x)  # <-
        return x
    """),
    "register_buffer_in_forward": model("""
        self.register_buffer("out", x)  # <-
        return x
    """),
    "global_statement": src("""
        _last = None


        class ModelNew(nn.Module):
            def forward(self, x):
                global _last
                y = torch.empty_like(x)
                _launch(x, y)
                _last = y  # <-
                return y
    """),
    "in_a_helper_reached_from_forward": src("""
        class ModelNew(nn.Module):
            def _run(self, x):
                y = torch.empty_like(x)
                _launch(x, y)
                self.prev = y  # <-
                return y

            def forward(self, x):
                return self._run(x)
    """),
}


@pytest.mark.parametrize("name", sorted(STATEFUL_CHEATS))
def test_stateful_forward_fires(name):
    finding = assert_fires(STATEFUL_CHEATS[name], "stateful-forward")
    assert "state" in finding.message


def test_state_built_in_init_and_locals_in_forward_are_fine():
    assert_clean(model("""
        outs = []
        y = torch.empty_like(x)
        _launch(x, y)
        outs.append(y)
        shape = self.shape
        return outs[0]
    """, init="self.shape = (4, 4)\nself.buf = torch.empty(4)\nself.cache = {}"))


# -- whole files ----------------------------------------------------------------------------------

LEGIT_FILES = sorted((REPO / "examples").glob("*/kernel.py")) + [
    FIXTURES / "candidates" / "affine_ok.py",
    FIXTURES / "candidates" / "argmax_ok.py",
    FIXTURES / "candidates" / "cuda_inline.py",
    FIXTURES / "candidates" / "batchnorm_running_stats.py",
    FIXTURES / "gpu" / "cuda_pointwise_chain.py",
]


@pytest.mark.parametrize("path", LEGIT_FILES, ids=[str(p.relative_to(REPO)) for p in LEGIT_FILES])
def test_legitimate_candidates_pass_untouched(path):
    findings = check_source(path.read_text(), str(path))
    assert findings == [], render(findings)


def test_patches_softmax_is_caught_as_monkey_patching():
    findings = check_source((FIXTURES / "candidates" / "patches_softmax.py").read_text())
    patched = {f.line for f in findings if f.rule == "monkey-patch"}
    assert patched == {13, 14, 15, 16, 17, 18}, render(findings)
    assert ("torch-compute", 26) in {(f.rule, f.line) for f in findings}  # forward calls torch.softmax


# The side-stream candidate as it first was: it creates the stream lazily in forward.
SIDE_STREAM_LAZY = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _chain(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask, other=0.0) * 2.0, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = None

    def forward(self, x):
        if self.side is None:
            self.side = torch.cuda.Stream()
        x = x.contiguous()
        y = torch.empty_like(x)
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            _chain[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
'''


def test_side_stream_candidate_is_caught_as_streams_and_state():
    found = {(f.rule, f.line) for f in check_source(SIDE_STREAM_LAZY)}
    assert {("streams", 21), ("stateful-forward", 21), ("streams", 24), ("streams", 25)} <= found, found
    assert {rule for rule, _ in found} == {"streams", "stateful-forward"}


def test_side_stream_fixture_hides_from_the_static_rules():
    """tests/fixtures/gpu/side_stream_chain.py fetches the stream API with literal getattr, which the
    static rules deliberately leave to the dynamic guard (the GPU test expects its side-stream finding)."""
    findings = check_source((FIXTURES / "gpu" / "side_stream_chain.py").read_text())
    assert findings == [], render(findings)


GUARD_CORPUS = sorted((FIXTURES / "guard").glob("*.py"))


@pytest.mark.parametrize("path", GUARD_CORPUS, ids=[p.stem for p in GUARD_CORPUS])
def test_guard_corpus_statically(path):
    """The adversarial corpus: `cheat: RULE` fixtures with a static rule fire it (at the line marked
    `# guard: RULE` when there is one); the ones meant for the dynamic guard and the `legit` ones have
    no static finding (a static finding would stop the cascade before the dynamic checks)."""
    text = path.read_text()
    kind, _, rest = text.splitlines()[0].strip('"').strip().partition(":")
    rule = rest.split(":")[0].strip() if kind == "cheat" else None
    findings = check_source(text, str(path))
    if rule in RULES and rule in _STATIC_RULES:
        assert rule in {f.rule for f in findings}, render(findings)
        marked = [i for i, line in enumerate(text.splitlines(), 1) if f"# guard: {rule}" in line]
        if marked:
            assert any(f.rule == rule and f.line in marked for f in findings), render(findings)
    else:
        assert findings == [], render(findings)


_STATIC_RULES = {"torch-compute", "nn-compute-layer", "try-except", "concurrency", "streams", "library-compute",
                 "monkey-patch", "global-state", "dynamic-code", "introspection", "tensor-subclass", "io-network",
                 "environment", "stateful-forward", "file-read", "cpp-system"}


def test_every_static_rule_is_a_catalogued_rule():
    assert _STATIC_RULES <= set(RULES)
