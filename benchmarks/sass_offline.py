"""A candidate's Triton kernels compiled for a GPU on a machine without one: registers, local memory, shared
memory and the machine code's instruction counts, in all and inside each loop. A static view between GPU calls
(the instructions a conv kernel's loop issues around its tensor-core ones, what an epilogue costs), not a timing.

    python benchmarks/sass_offline.py PROBLEM CANDIDATE [--kernel SUBSTRING] [--arch 90] [--dump DIR] [--json OUT]

Runs the candidate's forward once at the problem's sizes under Triton's interpreter with every launch recorded
and none run (the host code runs in this process: for trusted candidates only, such as our bench's best.py
files), its host code taking the paths it would take on a GPU (each `.is_cuda` reads true). Then, in a second
process, compiles each distinct launch (kernel, constants, argument types) with Triton's compiler for the
target (sm_90 by default) as the GPU would specialize it (pointers and integers divisible by 16 marked so,
integers equal to 1 made constants) and reads the cubin with the CUDA tools Triton ships (cuobjdump,
nvdisasm). Host code that needs a kernel's results (values read back) sees garbage: kernels after such a point
may be missing, and the forward's failure is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

PHASE_ENV = "KFOUNDRY_SASS_LAUNCHES"  # set in the compiling process: the recorded launches' file
TOOLS = "backends/nvidia/bin"


def _load(path: Path, name: str):
    """The module of a problem file (its folder on sys.path first, as for optimize) or of a candidate file, the
    candidate's `.is_cuda` tests reading true (host code only: Triton reads the kernels' lines from the file)."""
    from kfoundry.problem import load_module, load_problem_module, read_problem

    if name.endswith("problem"):
        return load_problem_module(read_problem(path))
    return load_module(path, re.sub(r"\b([A-Za-z_][\w.]*)\.is_cuda\b", "True", path.read_text()), name)


def _launch_spec(fn, args: tuple, kwargs: dict) -> dict:
    """What the GPU's launcher would specialize the kernel on: argument types, constants, divisibility."""
    import torch
    from triton.runtime.jit import JITFunction

    kernel = JITFunction(fn)
    values = dict(zip(kernel.arg_names, args))
    values.update(kwargs)
    options = {k: values.pop(k) for k in ("num_warps", "num_stages", "maxnreg") if k in values}
    signature, constants, attrs = {}, [], []
    for i, (name, param) in enumerate(zip(kernel.arg_names, kernel.params)):
        value = values[name]
        if param.is_constexpr or value is None or (isinstance(value, int) and not isinstance(value, bool)
                                                   and value == 1):
            signature[name] = "constexpr"
            constants.append([i, value])
        elif isinstance(value, torch.Tensor):
            signature[name] = "*" + {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
                                     torch.float64: "fp64", torch.int64: "i64", torch.int32: "i32",
                                     torch.int8: "i8", torch.uint8: "u8", torch.bool: "i1"}[value.dtype]
            attrs.append([i, [["tt.divisibility", 16]]])
        elif isinstance(value, bool):
            signature[name] = "i1"
        elif isinstance(value, int):
            signature[name] = "i32" if -2 ** 31 <= value < 2 ** 31 else "i64"
            if value % 16 == 0:
                attrs.append([i, [["tt.divisibility", 16]]])
        elif isinstance(value, float):
            signature[name] = "fp32"
        else:
            raise TypeError(f"{fn.__name__}: argument {name} of type {type(value).__name__}")
    return {"kernel": fn.__name__, "signature": signature, "constants": constants, "attrs": attrs,
            "options": options}


def record_launches(problem: Path, candidate: Path) -> tuple[list[dict], str | None]:
    """Every distinct launch of one forward (under the interpreter, none run), and the forward's failure."""
    import torch
    import triton.runtime.interpreter as interpreter

    launches: list[dict] = []

    def record(self, *args, grid, warmup, **kwargs):
        spec = _launch_spec(self.fn, args, kwargs)
        if spec not in launches:
            launches.append(spec)

    interpreter.InterpretedFunction.run = record
    problem_module, candidate_module = _load(problem, "sass_problem"), _load(candidate, "sass_candidate")
    torch.manual_seed(0)
    failure = None
    try:
        model = candidate_module.ModelNew(*problem_module.get_init_inputs())
        with torch.no_grad():
            model(*problem_module.get_inputs())
    except Exception as exc:  # host code reading a result that no kernel wrote
        failure = f"{type(exc).__name__}: {str(exc)[:300]}"
    return launches, failure


def _tool(name: str) -> str:
    import triton

    return str(Path(triton.__file__).parent / TOOLS / name)


def loop_bodies(sass: str) -> list[dict]:
    """Each backward branch's span of instructions (a loop body, innermost first where nested): its length and
    its instruction kinds."""
    items: list[tuple[str, str]] = []
    for line in sass.splitlines():
        label = re.match(r"\.(L_x_\d+):", line)
        if label:
            items.append(("label", label.group(1)))
            continue
        instruction = re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(.*?);", line)
        if instruction:
            items.append(("op", instruction.group(1)))
    where = {name: i for i, (kind, name) in enumerate(items) if kind == "label"}
    loops = []
    for i, (kind, text) in enumerate(items):
        target = re.search(r"BRA\s+`\(\.(L_x_\d+)\)", text) if kind == "op" else None
        if target and where.get(target.group(1), i) < i:
            body = [t for k, t in items[where[target.group(1)]:i + 1] if k == "op"]
            if len(body) > 1:  # not the branch to itself that ends every kernel
                loops.append({"instructions": len(body), "kinds": _kinds(body)})
    return loops


def _kinds(instructions: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for text in instructions:
        op = re.sub(r"^@!?U?P\w+\s+", "", text).split()[0].split(".")[0]
        counts[op] = counts.get(op, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: -item[1]))


def compile_launches(candidate: Path, launches: list[dict], arch: int, dump: Path | None) -> list[dict]:
    """Each launch compiled for `arch`: its resources and instruction counts."""
    import triton
    from triton.backends.compiler import GPUTarget

    module = _load(candidate, "sass_candidate")
    rows = []
    for n, launch in enumerate(launches):
        source = triton.compiler.ASTSource(fn=getattr(module, launch["kernel"]), signature=launch["signature"],
                                           constexprs={(i,): v for i, v in launch["constants"]},
                                           attrs={(i,): a for i, a in launch["attrs"]})
        compiled = triton.compile(source, target=GPUTarget("cuda", arch, 32), options=launch["options"])
        with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as handle:
            handle.write(compiled.asm["cubin"])
        usage = subprocess.run([_tool("cuobjdump"), "--dump-resource-usage", handle.name], capture_output=True,
                               text=True, check=True).stdout
        sass = subprocess.run([_tool("nvdisasm"), "-c", handle.name], capture_output=True, text=True,
                              check=True).stdout
        os.unlink(handle.name)
        found = {key: int(value) for key, value in re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", usage)}
        instructions = [m.group(1) for m in re.finditer(r"\s+/\*[0-9a-f]{4,}\*/\s+(.*?);", sass)]
        names = list(launch["signature"])
        constants = {names[i]: v for i, v in launch["constants"]}
        rows.append({"kernel": launch["kernel"], "constants": constants, "options": launch["options"],
                     "registers": found.get("REG"), "local_bytes": found.get("LOCAL"),
                     "shared_bytes": compiled.metadata.shared, "instructions": len(instructions),
                     "kinds": _kinds(instructions), "loops": loop_bodies(sass)})
        if dump is not None:
            dump.mkdir(parents=True, exist_ok=True)
            (dump / f"{n:02d}_{launch['kernel']}.sass").write_text(sass)
            (dump / f"{n:02d}_{launch['kernel']}.ttgir").write_text(compiled.asm["ttgir"])
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problem", type=Path)
    parser.add_argument("candidate", type=Path)
    parser.add_argument("--kernel", default="", help="only the kernels whose name contains this")
    parser.add_argument("--arch", type=int, default=90, help="compute capability times ten (90: Hopper)")
    parser.add_argument("--dump", type=Path, help="write each kernel's SASS and TTGIR here")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    for path in (args.problem, args.candidate):
        if not path.is_file():
            parser.error(f"no such file: {path}")
    missing = [name for name in ("cuobjdump", "nvdisasm") if not Path(_tool(name)).is_file()]
    if missing:
        parser.error(f"this Triton has no {' or '.join(missing)} in {Path(_tool(missing[0])).parent}")
    recorded = os.environ.get(PHASE_ENV)
    if recorded:  # the compiling process: no interpreter here
        launches = json.loads(Path(recorded).read_text())
        print(json.dumps(compile_launches(args.candidate, launches, args.arch, args.dump)))
        return 0
    os.environ["TRITON_INTERPRET"] = "1"
    launches, failure = record_launches(args.problem, args.candidate)
    launches = [launch for launch in launches if args.kernel in launch["kernel"]]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(launches, handle)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env[PHASE_ENV] = handle.name
    done = subprocess.run([sys.executable, __file__, *(argv if argv is not None else sys.argv[1:])], env=env,
                          capture_output=True, text=True)
    os.unlink(handle.name)
    if done.returncode != 0:
        print(done.stderr[-3000:], file=sys.stderr)
        return 1
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    if failure:
        print(f"the forward stopped ({failure}): the kernels launched before it follow")
    for row in rows:
        loops = ", ".join(f"{loop['instructions']}" for loop in row["loops"]) or "-"
        top = " ".join(f"{op}:{count}" for op, count in list(row["kinds"].items())[:8])
        print(f"{row['kernel']} {row['constants']}: {row['registers']} registers, {row['local_bytes']} B local, "
              f"{row['shared_bytes']} B shared, {row['instructions']} instructions (loops: {loops}) | {top}")
    if args.json:
        args.json.write_text(json.dumps({"problem": str(args.problem), "candidate": str(args.candidate),
                                         "arch": args.arch, "forward_failure": failure, "kernels": rows},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
