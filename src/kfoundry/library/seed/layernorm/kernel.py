"""Triton LayerNorm over the last dim (affine weight and bias): one program per row."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, sx_row, sy_row, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * sx_row + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    d = tl.where(mask, x - mean, 0.0)
    var = tl.sum(d * d, axis=0) / n_cols
    rstd = tl.rsqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = d * rstd * w + b
    tl.store(y_ptr + row * sy_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape, eps):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape, eps=eps)

    def forward(self, x):
        n_cols = self.ln.weight.numel()
        x2 = x.contiguous().view(-1, n_cols)
        y = torch.empty_like(x2)
        w = self.ln.weight.contiguous()
        b = self.ln.bias.contiguous()
        BLOCK = triton.next_power_of_2(n_cols)
        num_warps = 4 if BLOCK <= 2048 else (8 if BLOCK <= 8192 else 16)
        _layernorm_kernel[(x2.shape[0],)](x2, w, b, y, n_cols, x2.stride(0), y.stride(0),
                                          float(self.ln.eps), BLOCK=BLOCK, num_warps=num_warps)
        return y.view(x.shape)
