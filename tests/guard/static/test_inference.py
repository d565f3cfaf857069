"""The kind inference: shapes, sizes, allocations, views, Python numbers and Triton kernels are not
taken for tensor compute (torch-compute does not fire on legitimate host code)."""

import pytest

from tests.guard.static.helpers import assert_clean, model, src


# -- torch-compute: what is not a tensor ----------------------------------------------------------

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
