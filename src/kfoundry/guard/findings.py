"""What the guard reports: findings, each naming its rule and its evidence."""

from __future__ import annotations

from dataclasses import dataclass, field

POLICIES = ("strict", "permissive")

# rule -> (what it catches, what to do instead)
RULES: dict[str, tuple[str, str]] = {
    # static: the candidate's source
    "torch-compute": ("PyTorch computes part of the problem in forward or a launch wrapper",
                      "move the computation into your own Triton/CUDA kernel"),
    "nn-compute-layer": ("an nn layer is called as a submodule in forward, so PyTorch computes it",
                         "read the layer's .weight/.bias and compute with your own kernel"),
    "try-except": ("try/except around the computation (a fallback path)",
                   "remove the fallback: a candidate must compute one way"),
    "concurrency": ("threads, processes or async tasks", "launch kernels from forward on the current stream"),
    "streams": ("CUDA streams or events created or switched by the candidate",
                "launch on torch.cuda.current_stream(); the timer only sees the current stream"),
    "library-compute": ("library compute (cuBLAS, cuDNN, CUTLASS, at::/torch:: ops) inside CUDA/C++ source",
                        "write the kernel yourself"),
    "monkey-patch": ("assignment, setattr or delattr on an imported module or class",
                     "do not change torch, the harness or the standard library"),
    "global-state": ("a call or assignment that changes PyTorch's global state (flags, precision, threads)",
                     "leave global settings alone; choose precision inside your kernel"),
    "dynamic-code": ("eval, exec, compile or getattr with a computed name", "write the code out plainly"),
    "introspection": ("reaching into the interpreter (sys.modules, gc, inspect, builtins, importlib, globals())",
                      "use only your own module and its imports"),
    "tensor-subclass": ("a tensor subclass or __torch_function__/__torch_dispatch__ hook",
                        "return plain tensors"),
    "io-network": ("file writes, sockets, subprocesses or HTTP", "compute in memory, in the process"),
    "environment": ("reading environment variables", "take configuration from the constructor arguments"),
    "file-read": ("reading files, directories, /proc, /sys or devices from host code",
                  "take every input from forward's arguments and the constructor; read nothing from disk"),
    "cpp-system": ("C/C++ code that reads or writes files, starts processes, opens sockets, reads the environment "
                   "or loads libraries",
                   "a CUDA/C++ extension may only compute: no libc I/O, processes, sockets or environment"),
    "stateful-forward": ("forward writes to self attributes or module globals (results can carry between calls)",
                         "keep forward free of state; cache only things derived from parameters, in __init__"),
    # dynamic: what ran
    "aten-compute": ("PyTorch compute ops ran during forward outside the candidate's kernels",
                     "compute in your own kernels"),
    "library-kernel": ("library kernels (cuBLAS, cuDNN, CUTLASS) ran during forward", "write the kernel yourself"),
    "no-custom-kernel": ("no custom kernel ran during forward", "launch at least one Triton or CUDA kernel"),
    "ghost-replay": ("the output is still right with the candidate's kernels turned off",
                     "the kernels must be what computes the result"),
    "output-caching": ("the output does not follow new input data (cached by address or by call)",
                       "compute from the inputs on every call"),
    "input-mutation": ("forward changed an input in place, which the reference does not do",
                       "write results to new tensors"),
    "global-state-change": ("global PyTorch state or a timing function was changed while the candidate ran",
                            "leave flags and functions as they are"),
    "physical-limit": ("faster than the hardware can move the data", "make sure the kernel does the whole work"),
    "side-stream": ("work ran where the timer's stream does not see it", "launch on the current stream"),
    "outliers": ("wrong only on inputs with sparse large outliers: the kernel shortcuts the computation",
                 "reduce over every element"),
}


@dataclass
class Finding:
    rule: str
    message: str
    line: int | None = None
    evidence: list[str] = field(default_factory=list)

    def render(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        return f"[{self.rule}] {where}{self.message}"

    @property
    def advice(self) -> str:
        return RULES.get(self.rule, ("", ""))[1]


# rules that are warnings, not failures, under the permissive policy (PyTorch compute allowed there)
PERMISSIVE_WARNINGS = frozenset({"torch-compute", "nn-compute-layer", "aten-compute", "library-kernel"})
