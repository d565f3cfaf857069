"""Writing code: pointwise ops as Triton expressions (`expr`), the host side of the forward (`host`), one Triton
kernel and what every template shares (`kernel`), and the whole candidate file from a plan (`codegen`)."""
