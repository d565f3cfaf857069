"""Triton tiled matmul for silu(x @ W^T + b) * scale, with bias, SiLU and scale fused in the epilogue."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _linear_silu_scale_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K,
                              sxm, sxk, swn, swk, sym, syn, scale,
                              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                              GROUP_M: tl.constexpr, IEEE: tl.constexpr):
    # grouped tile order so that neighbouring programs share rows of x in L2
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    group_size = GROUP_M * num_pid_n
    first_m = (pid // group_size) * GROUP_M
    rows_in_group = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group_size) % rows_in_group
    pid_n = (pid % group_size) // rows_in_group

    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(x_ptr + rm[:, None] * sxm + kk[None, :] * sxk,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + kk[:, None] * swk + rn[None, :] * swn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        if IEEE:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)

    bias = tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)
    v = acc + bias[None, :]
    out = v * tl.sigmoid(v) * scale
    tl.store(y_ptr + rm[:, None] * sym + rn[None, :] * syn, out.to(y_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x):
        w, b = self.linear.weight, self.linear.bias
        x2 = x.reshape(-1, x.shape[-1])
        M, K = x2.shape
        N = w.shape[0]
        y = torch.empty((M, N), device=x.device, dtype=x.dtype)
        BM, BN, BK = 128, 128, 32
        grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
        _linear_silu_scale_kernel[grid](x2, w, b, y, M, N, K,
                                        x2.stride(0), x2.stride(1), w.stride(0), w.stride(1),
                                        y.stride(0), y.stride(1), float(self.scale),
                                        BM=BM, BN=BN, BK=BK, GROUP_M=8,
                                        IEEE=(x.dtype == torch.float32),
                                        num_warps=8, num_stages=3)
        return y.view(*x.shape[:-1], N)
