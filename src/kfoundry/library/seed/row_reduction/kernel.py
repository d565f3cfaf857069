"""Triton row mean over the last dim: one program per row, looping over the row in fixed-size chunks."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_mean_kernel(x_ptr, y_ptr, n_cols, sx_row, sx_col, sy_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    # accumulate a vector of partial sums, reduce once at the end: fewer cross-lane reductions
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        c = c0 + cols
        acc += tl.load(x_ptr + row * sx_row + c * sx_col, mask=c < n_cols, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / n_cols
    tl.store(y_ptr + row * sy_row, mean.to(y_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        n_rows, n_cols = x.shape
        y = torch.empty((n_rows, 1), device=x.device, dtype=x.dtype)
        BLOCK = min(triton.next_power_of_2(n_cols), 2048)
        _row_mean_kernel[(n_rows,)](x, y, n_cols, x.stride(0), x.stride(1), y.stride(0),
                                    BLOCK=BLOCK, num_warps=4 if BLOCK <= 1024 else 8)
        return y
