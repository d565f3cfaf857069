"""Kernels equal up to their names are written once: an RNN cell called in a Python loop over time."""

import re
from pathlib import Path

from kfoundry.experts.composer.emit.dedup import canonical
from tests.experts.composer.helpers import compose_ok, first, submit, verdict

REPO = Path(__file__).resolve().parents[4]

A = '''@triton.jit
def _pointwise_3_kernel(n, x_ptr, add_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    add = x + 1.0
    tl.store(add_ptr + offs, add, mask=offs < n)
'''


def test_names_of_the_kernel_its_parameters_and_locals_do_not_count():
    renamed = (A.replace("_pointwise_3_kernel", "_pointwise_9_kernel").replace("add", "add_7")
               .replace("x_ptr", "y_ptr"))
    assert canonical(A, "_pointwise_3_kernel") == canonical(renamed, "_pointwise_9_kernel")


def test_constexpr_names_operations_and_constants_do():
    base = canonical(A, "_pointwise_3_kernel")
    assert canonical(A.replace("BLOCK", "TILE"), "_pointwise_3_kernel") != base  # launches pass it by keyword
    assert canonical(A.replace("x + 1.0", "x + 2.0"), "_pointwise_3_kernel") != base
    assert canonical(A.replace("tl.load", "tl.atomic_add"), "_pointwise_3_kernel") != base
    assert canonical(A.replace("offs < n)\n    add", "offs < n, other=0.0)\n    add"), "_pointwise_3_kernel") != base


def test_a_cell_called_in_a_loop_writes_each_kernel_once_and_passes_the_evaluator():
    path = REPO / "benchmarks" / "coverage" / "14_rnn_cell_loop.py"
    small = {"batch_size": 3, "steps": 6, "input_size": 5, "hidden_size": 7}
    candidate = first(compose_ok(path, set_values=small, max_variants=1))
    source = candidate.source
    body = source.split("class ModelNew")[1]
    written = re.findall(r"def (_\w+?_\d+_kernel)", source)
    assert written == ["_gemm_addmm_0_kernel", "_recurrent_0_kernel"]  # x W_ih + both biases; the step (h W_hh, tanh)
    # the cell's steps are one recurrence (plan/recurrence.py): each kernel is launched from one place
    assert "for t in range(" in body
    assert body.count("_gemm_addmm_0_kernel[") == 1 and body.count("_recurrent_0_kernel[") == 1
    verdict(submit(path, source, set_values=small))
