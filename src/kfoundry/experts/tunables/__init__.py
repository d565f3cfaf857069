"""The tunable constants of a candidate, found by reading its AST, and rewriting them in place.

What is tunable:
* literal keywords of Triton launches: `kernel[grid](..., BLOCK_M=64, num_warps=4, num_stages=3)`;
* int constants bound to block/tile/group/split-like names (`BLOCK = 1024`, `BM, BN, BK = 128, 64, 32`,
  `self.BLOCK = 256`) that a launch, a grid or `triton.cdiv` reads (module constants also when a kernel does);
* the entries of `triton.Config({...}, num_warps=..., num_stages=...)`;
* in CUDA source strings (those given to `load_inline`, or holding a `__global__`): `#define NAME <int>`,
  `[const|constexpr] int NAME = <int>;`, the literal block size of `<<<grid, 256>>>` and literal template
  arguments of a launch. Regular expressions read inside the string once the AST has found it.

A literal that spells the same size elsewhere (the 1024 of `triton.cdiv(n, 1024)` beside `BLOCK=1024`, the 255
and 256 of `<<<(n + 255) / 256, 256>>>`) is rewritten together with it; a size that cannot be told apart from
another one that way is left alone. Rewrites replace digits only: the rest of the file stays byte-identical.
"""

from kfoundry.experts.tunables.cuda import CudaFacts, cuda_rule
from kfoundry.experts.tunables.discovery import Discovery, discover, find_tunables
from kfoundry.experts.tunables.python import (
    TRITON_DEFAULT_STAGES,
    TRITON_DEFAULT_WARPS,
    TileGroup,
    line_starts,
    node_span,
    triton_rule,
)
from kfoundry.experts.tunables.tunable import (
    BLOCK_1D,
    BLOCK_2D,
    CUDA_PER_THREAD,
    CUDA_THREADS,
    CUDA_TILE,
    CUDA_WARPS,
    GROUPS,
    KINDS,
    SPLITS,
    STAGES,
    WARPS,
    Span,
    Tunable,
    apply_values,
)

__all__ = ["BLOCK_1D", "BLOCK_2D", "CUDA_PER_THREAD", "CUDA_THREADS", "CUDA_TILE", "CUDA_WARPS", "GROUPS", "KINDS",
           "SPLITS", "STAGES", "TRITON_DEFAULT_STAGES", "TRITON_DEFAULT_WARPS", "WARPS", "CudaFacts", "Discovery",
           "Span", "TileGroup", "Tunable", "apply_values", "cuda_rule", "discover", "find_tunables", "line_starts",
           "node_span", "triton_rule"]
