"""What each island's first kernel tries: a table of strategies per problem class.

The initializer is asked once per island. Asked the same question, a model answers the same way, so each
island's prompt names its own strategy and lists what the other islands were asked; the islands then start
from different designs and the search has something to choose between.

Which island gets which strategy depends on the problem class and the island alone. A strategy's plan says
nothing about the problem's sizes; the sizes a design is meant for (`suits`: "short sequences, ...") are said
only where the shapes under test are the problem file's own, the sizes the final kernel runs at. A run that
tests at smaller `--set` sizes would otherwise have its strategies read against the test's shapes (a sequence
of 32 under test, 512 in the file)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from kfoundry.input_facts import ProblemFacts


@dataclass(frozen=True)
class Strategy:
    name: str  # short, recorded with the candidate and in the library
    plan: str  # what the prompt asks the model to build
    suits: str = ""  # the sizes the design is meant for: said only at the problem file's own sizes

    def described(self, file_sizes: bool) -> Strategy:
        """This strategy as a prompt gives it: with the sizes it suits where the shapes under test are the
        problem file's own (`file_sizes`), else without them."""
        if not self.suits or not file_sizes:
            return self
        return replace(self, plan=f"{self.plan}, for {self.suits}")


def _table(*rows: tuple[str, ...]) -> tuple[Strategy, ...]:
    return tuple(Strategy(*row) for row in rows)


STRATEGIES: dict[str, tuple[Strategy, ...]] = {
    "gemm": _table(
        ("square tiles", "a tiled product with 128x128 output tiles, BLOCK_K 32, grouped program order for L2 "
                         "reuse and the epilogue fused before the store"),
        ("split-K", "split the K dimension across programs (or a second grid axis) and reduce the partial "
                    "tiles", "shapes where M x N alone gives too few tiles to fill the SMs"),
        ("precision split", "fp32 products from lower-precision tensor-core products: each operand split into "
                            "a high and a low part (3xTF32, or fp16 parts after a power-of-two scale), the "
                            "small cross terms summed in a separate accumulator"),
        ("wide tiles, deep pipeline", "rectangular 64x256 or 256x64 tiles, the long side along the larger of "
                                      "M and N at the problem file's own sizes, BLOCK_K 64 and 4 pipeline "
                                      "stages, 8 warps"),
    ),
    "conv": _table(
        ("implicit GEMM, channels-last", "an implicit GEMM over a channels-last copy of the input: output "
                                         "positions x output channels tiles, K = input channels x kernel taps, "
                                         "the epilogue fused"),
        ("implicit GEMM on NCHW", "an implicit GEMM that reads the NCHW input directly (index math per tap), "
                                  "no layout copy, K ordered so that loads along the width are contiguous"),
        ("direct convolution", "a direct convolution: each program computes a tile of output positions for a "
                               "block of output channels, looping over input channels and kernel taps"),
        ("output tile holds all channels", "tiles that hold every output channel of a set of positions, so "
                                           "reductions or normalizations over channels finish in the same "
                                           "program"),
    ),
    "attention": _table(
        ("online softmax", "one program per block of queries streaming over key/value blocks with a running "
                           "max and sum (flash-attention style); nothing of size L x L in memory"),
        ("two passes", "a first pass for the row maxima and sums of the scores, a second for the normalized "
                       "weights times V; simpler indexing, the scores recomputed"),
        ("scores materialized", "the scores as a GEMM into a buffer, a row softmax kernel, then a second GEMM: "
                                "three simple kernels, each easy to make correct"),
        ("heads per program", "one program per (batch, head) pair looping over query blocks",
                              "short sequences, where blocks per head are few"),
    ),
    "norm": _table(
        ("row per program", "one program per normalized row (or group) held in registers: statistics and "
                            "normalization in one pass over memory"),
        ("chunked two-pass", "a loop over chunks of the row for the statistics (Welford or sum and sum of "
                             "squares), then a second loop that normalizes", "rows too long for one block"),
        ("split statistics", "partial sums from many programs per row and a small finishing kernel",
                             "few rows of very many elements"),
        ("rows per program", "several rows per program as a 2D tile", "many rows of few elements"),
    ),
    "softmax": _table(
        ("row per program", "one program per row held in registers: max, exponentials and sum in one pass"),
        ("online softmax", "a loop over chunks of the row with a running max and rescaled sum, then a "
                           "second loop that writes the normalized values", "rows too long for one block"),
        ("rows per program", "a 2D tile of several rows per program", "many short rows"),
        ("split row", "partial maxima and sums from several programs per row and a finishing step",
                      "a few very long rows"),
    ),
    "recurrent": _table(
        ("projection then fused steps", "the input's projection for every time step as one GEMM up front, then "
                                        "per step one kernel: each program a tile of batch rows x hidden units "
                                        "of every gate (the hidden state times each gate's rows of W_hh), the "
                                        "step's projection added and the cell update in registers, h (and c) "
                                        "written straight into the output at that step"),
        ("persistent over time", "one launch for the whole sequence: programs own hidden units, keep their "
                                 "rows of W_hh on chip, and meet at every step through a flag or counter in "
                                 "global memory before reading the new hidden state"),
        ("batched gates GEMM", "per step one GEMM of the hidden state against all of W_hh (the gates side by "
                               "side) with the projection added in its epilogue, then one small pointwise "
                               "kernel for the cell update: simple, two launches a step"),
        ("layers as a wavefront", "for stacked layers, layer l's step t runs beside layer l-1's step t+1 in the "
                                  "same launch, so the grid has twice the work while the sequence is walked"),
    ),
    "scan": _table(
        ("block scan with a carry", "one program per row (or per independent sequence) looping over blocks "
                                    "in order: scan inside the block (tl.associative_scan / tl.cumsum), add "
                                    "the carry from the blocks before it"),
        ("decoupled look-back", "many programs per row: each scans its block, publishes its aggregate, and "
                                "adds the prefix of the blocks before it by looking back at their published "
                                "aggregates"),
        ("three phases", "block sums in a first kernel, a scan of the block sums, then a kernel that scans "
                         "each block again with its offset added"),
        ("whole row in one block", "the whole row in one block: a single associative scan per program, "
                                   "several rows to a program where more than one fits",
                                   "rows short enough for one block"),
    ),
    "pooling": _table(
        ("output tile per program", "each program computes a tile of output positions, reading each window "
                                    "from the input with index math and masks at the borders"),
        ("channels in the tile", "tiles of output positions x channels so that loads are contiguous along "
                                 "the fastest-varying dimension of the input's layout"),
        ("fused with its neighbours", "the pooling fused with the elementwise work before and after it, so "
                                      "the input is read once and only the pooled output is written"),
        ("separable windows", "for average pooling, sums along one axis then the other (separable windows), "
                              "keeping the partial sums in registers"),
    ),
    "reduction": _table(
        ("row per program", "one program per reduced row held in registers, the elementwise work fused"),
        ("rows per program", "a 2D tile of several rows per program", "many short rows"),
        ("split reduction", "partial results from many programs per row, then a small finishing kernel",
                            "few long rows"),
        ("reduce along the contiguous axis", "a layout where the reduced axis is the contiguous one (or "
                                             "tiles that read it contiguously) when the reduction runs over a "
                                             "strided dimension"),
    ),
    "pointwise": _table(
        ("one flat pass", "one kernel over the flattened output, 1024 to 4096 elements per program, every "
                          "operation fused"),
        ("2D tiles", "2D tiles along the contiguous last dimension, broadcasting operands loaded once per "
                     "tile"),
        ("persistent grid", "a grid of about the SM count with each program looping over blocks"),
        ("vectorized rows", "one program per row of the last dimension with wide contiguous loads"),
    ),
    "other": _table(
        ("straightforward", "the most direct correct kernel: one program per output tile, every operation "
                            "fused where it is simple"),
        ("fewest passes", "as few passes over memory as possible, intermediates kept in registers"),
        ("most parallel", "the decomposition with the most independent programs"),
        ("library shape", "the structure of the closest retrieved kernel, adapted to this problem"),
    ),
}


def table_for(problem_class: str) -> tuple[Strategy, ...]:
    return STRATEGIES.get(problem_class, STRATEGIES["other"])


def at_file_sizes(facts: ProblemFacts | None) -> bool:
    """Whether the shapes under test are the problem file's own: no `--set` override, or each one the value
    the file itself writes. False where nothing is known of them (no facts)."""
    if facts is None:
        return False
    return all(facts.file_values.get(name) == repr(value) for name, value in facts.overrides.items())


def assignment(problem_class: str, island: int, islands: int,
               facts: ProblemFacts | None = None) -> tuple[Strategy, list[Strategy]]:
    """This island's strategy and those of the other islands (each island in turn takes the next row of the
    class's table; with more islands than rows the table starts over). The choice is the class's and the
    island's alone; the sizes each strategy suits are said only where `facts` (the shapes under test) are the
    problem file's own sizes."""
    file_sizes = at_file_sizes(facts)
    table = [strategy.described(file_sizes) for strategy in table_for(problem_class)]
    mine = table[island % len(table)]
    others = []
    for other in range(max(islands, 1)):
        strategy = table[other % len(table)]
        if other != island and strategy != mine and strategy not in others:
            others.append(strategy)
    return mine, others
