"""Whole networks: what the composer makes of them (CPU), how many launches a forward takes, and the GPU table.

Stage `compose` (CPU, the default): each problem of benchmarks/network_suite/ is composed at its file's sizes with
kfoundry.experts.composer.compose(path, max_variants=4, tolerance=1e-4) (on the meta device where the problem
allows it), in a subprocess of its own with a time limit. Recorded per problem: composed or not, the unsupported
ops and the composer's message, the seconds, the variants, the kernels (the composer's plan: fused groups; and the
@triton.jit functions that serve them) and the launch
sites reachable from ModelNew.forward (those inside a Python loop counted apart) of the first variant, and the
largest variant's size in bytes. The variants' sources go to OUT/<stamp>/ (kfoundry-runs/ is ignored by git).

With --launches (CPU): the first variant runs one forward at the small sizes of SMALL below with TRITON_INTERPRET=1
in a subprocess, and every kernel launch is counted (Triton's KernelInterface.__getitem__, the `kernel[grid]`
of every launch, and the interpreter's run, each kernel execution; both reported). The file-size variant is run
where it runs at the small sizes (candidates read sizes at call time); otherwise the problem is composed again
at the small sizes and that variant is run (the row says which). Its output is compared with the reference's.

    python benchmarks/network_suite/run.py [--problems 1-12] [--timeout 120] [--jobs 2] [--launches]
        [--launch-timeout 300] [--out kfoundry-runs/network_suite] [--json PATH]
    python benchmarks/network_suite/run.py --merge GPU.json --compose COMPOSE.json [--json PATH]

Stage `gpu` is benchmarks/programmatic_suite.py on this folder (README.md: the command); `--merge` joins its JSON
(eager, torch.compile and our times per problem) with a compose/launch JSON of this script into one table.

Prints a table and writes JSON to benchmarks/results/network_suite-compose-cpu-<UTC stamp>.json (its "stage" says
whether launches were counted; --merge: network_suite-merged-...). The commit and the files under src/ that
differ from it are recorded. Nothing is timed on a
CPU: the seconds are the composer's own. Exit code 0 when it ran, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "src"))

RESULTS_DIR = ROOT / "benchmarks" / "results"
DEFAULT_OUT = ROOT / "kfoundry-runs" / "network_suite"
FORMAT = "kfoundry-network-suite/1"
MAX_VARIANTS = 4
TOLERANCE = 1e-4
SEED = 1

# problem number -> the small sizes --launches (and tests) run it at
SMALL: dict[int, dict[str, int]] = {
    1: {"batch_size": 2, "height": 32, "width": 32, "num_classes": 10},
    2: {"batch_size": 2, "height": 32, "width": 32, "num_classes": 10},
    3: {"batch_size": 2, "height": 32, "width": 32, "num_classes": 10},
    4: {"batch_size": 2, "in_features": 8, "growth": 4, "num_layers": 3, "height": 8, "width": 8},
    5: {"batch_size": 2, "height": 32, "width": 32, "num_classes": 10},
    6: {"batch_size": 2, "height": 32, "width": 32, "num_classes": 10},
    7: {"batch_size": 2, "steps": 4, "input_size": 16, "hidden_size": 8, "output_size": 4},
    8: {"batch_size": 2, "steps": 4, "input_size": 8, "hidden_size": 8, "num_layers": 2},
    9: {"batch_size": 2, "steps": 4, "input_size": 8, "hidden_size": 8, "num_layers": 2},
    10: {"batch_size": 2, "seq_len": 8, "n_embd": 16, "n_head": 2, "block_size": 16},
    11: {"batch_size": 2, "seq_len": 8, "d_model": 16, "n_head": 2},
    12: {"batch_size": 2, "height": 14, "width": 14, "dim": 12, "num_heads": 3, "window": 7, "depth": 2},
}


def problems(selection: str | None = None) -> list[tuple[int, Path]]:
    from kfoundry.bench.suite import discover

    return [(p.number, p.path) for p in discover(HERE, problems=selection).problems]


# -- reading a candidate's source --------------------------------------------------------------------

def _is_kernel(node: ast.AST) -> bool:
    """A function decorated with triton.jit / triton.autotune / triton.heuristics (or the bare names)."""
    if not isinstance(node, ast.FunctionDef):
        return False
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name in {"jit", "autotune", "heuristics"}:
            return True
    return False


def source_facts(source: str) -> dict[str, Any]:
    """Kernels defined, and the launch sites (`kernel[grid](...)`) reachable from ModelNew.forward through the
    module's functions and ModelNew's methods, each site once; `in_loops`: those inside a for / while."""
    tree = ast.parse(source)
    kernels = {n.name for n in tree.body if _is_kernel(n)}
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name not in kernels}
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew"), None)
    methods = {n.name: n for n in model.body if isinstance(n, ast.FunctionDef)} if model else {}
    sites: dict[int, tuple[bool, str]] = {}  # id(call node) -> (inside a loop, kernel)
    seen: set[int] = set()

    def visit(fn: ast.FunctionDef, in_loop: bool) -> None:
        if id(fn) in seen:
            return
        seen.add(id(fn))
        walk(fn.body, in_loop)

    def walk(nodes: list[ast.AST], in_loop: bool) -> None:
        for node in nodes:
            loop = in_loop or isinstance(node, (ast.For, ast.While, ast.comprehension))
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.Call):
                    func = child.func
                    if isinstance(func, ast.Subscript) and isinstance(func.value, ast.Name) and func.value.id in kernels:
                        sites[id(child)] = (sites.get(id(child), (False,))[0] or loop, func.value.id)
                    elif isinstance(func, ast.Name) and func.id in functions:
                        visit(functions[func.id], loop)
                    elif (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                          and func.value.id == "self" and func.attr in methods):
                        visit(methods[func.attr], loop)
                walk([child], loop)

    if "forward" in methods:
        visit(methods["forward"], False)
    return {"kernels": len(kernels), "kernels_launched": len({k for _, k in sites.values()}),
            "launch_sites": len(sites), "launch_sites_in_loops": sum(loop for loop, _ in sites.values())}


# -- workers (each in a subprocess of its own) --------------------------------------------------------

def work_compose(path: Path, save: Path) -> dict[str, Any]:
    from kfoundry.errors import ProblemError
    from kfoundry.experts.composer import compose
    from kfoundry.guard.static import check_source

    started = time.perf_counter()
    try:
        result = compose(path, max_variants=MAX_VARIANTS, tolerance=TOLERANCE)
    except ProblemError as exc:
        return {"composed": False, "unsupported": ["problem error"], "message": str(exc),
                "seconds": round(time.perf_counter() - started, 2), "variants": []}
    seconds = round(time.perf_counter() - started, 2)
    variants = []
    for index, candidate in enumerate(result.candidates):
        file = save / f"{path.stem}.v{index}.py"
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(candidate.source, encoding="utf-8")
        checked = time.perf_counter()
        check_source(candidate.source)  # the static guard's strict rules, as every evaluation runs them
        variants.append({"name": candidate.name, "bytes": len(candidate.source.encode()), "file": str(file),
                         "guard_seconds": round(time.perf_counter() - checked, 3), **source_facts(candidate.source)})
    return {"composed": bool(result.candidates), "unsupported": list(result.unsupported), "message": result.message,
            "seconds": seconds, "variants": variants}


class LaunchCounter:
    """Counts `kernel[grid](...)` launches (KernelInterface.__getitem__) and kernel executions (the interpreter's
    or the JIT's run, warm-ups left out) by kernel name."""

    def __init__(self) -> None:
        self.grid: dict[str, int] = {}
        self.runs: dict[str, int] = {}

    def install(self) -> None:
        from triton.runtime import jit

        counter, get_item = self, jit.KernelInterface.__getitem__

        def __getitem__(kernel, grid):
            launch = get_item(kernel, grid)

            def counted(*args, **kwargs):
                name = getattr(kernel, "__name__", None) or type(kernel).__name__
                counter.grid[name] = counter.grid.get(name, 0) + 1
                return launch(*args, **kwargs)
            return counted

        jit.KernelInterface.__getitem__ = __getitem__
        runners = [jit.JITFunction]
        try:
            from triton.runtime.interpreter import InterpretedFunction
            runners.append(InterpretedFunction)
        except ImportError:
            pass
        for cls in runners:
            run = cls.run

            def counted_run(kernel, *args, _run=run, **kwargs):
                if not kwargs.get("warmup"):
                    name = kernel.__name__
                    counter.runs[name] = counter.runs.get(name, 0) + 1
                return _run(kernel, *args, **kwargs)
            cls.run = counted_run

    def take(self) -> tuple[dict[str, int], dict[str, int]]:
        grid, runs = self.grid, self.runs
        self.grid, self.runs = {}, {}
        return grid, runs


def work_launches(path: Path, small: dict[str, int], candidate: Path | None) -> dict[str, Any]:
    import torch

    from kfoundry.problem import build_model, init_inputs_of, load_module, load_problem_module, make_inputs, \
        read_problem

    counter = LaunchCounter()
    counter.install()
    problem = load_problem_module(read_problem(path, small))
    init = init_inputs_of(problem)
    inputs = make_inputs(problem, SEED, None, "cpu")
    with torch.no_grad():
        expected = build_model(problem.Model, init, SEED, None, "cpu", False)(*inputs)

    def run(file: Path, label: str) -> dict[str, Any]:
        # a real file: Triton's @jit reads its kernels' source back through inspect
        module = load_module(file, file.read_text(encoding="utf-8"), f"network_suite_{label}")
        model = build_model(module.ModelNew, init, SEED, None, "cpu", False)
        with torch.no_grad():
            first = model(*inputs)
            first_grid, _ = counter.take()
            started = time.perf_counter()
            second = model(*inputs)
            seconds = time.perf_counter() - started
            grid, runs = counter.take()
        error = (first - expected).abs().max().item() if first.shape == expected.shape else None
        return {"launches": sum(grid.values()), "executions": sum(runs.values()),
                "launches_first_call": sum(first_grid.values()), "by_kernel": grid,
                "max_abs_error": error, "repeatable": bool(torch.equal(first, second)),
                "interpreter_seconds": round(seconds, 2)}

    tried = []
    if candidate is not None:
        try:
            return {"source": "file sizes", **run(candidate, "file")}
        except Exception as exc:  # noqa: BLE001 -- a size the variant does not take: compose at the small sizes
            tried.append(f"the file-size variant failed at the small sizes: {type(exc).__name__}: {str(exc)[:300]}")
    from kfoundry.experts.composer import compose

    result = compose(path, set_values=small, max_variants=1, tolerance=TOLERANCE)
    if not result.candidates:
        return {"source": None, "error": "; ".join(tried + [f"not composed at the small sizes: {result.message}"])}
    file = Path(tempfile.mkdtemp(prefix="network-suite-")) / f"{path.stem}.small.v0.py"
    file.write_text(result.candidates[0].source, encoding="utf-8")
    try:
        return {"source": "small sizes", "notes": tried, **run(file, "small")}
    except Exception as exc:  # noqa: BLE001
        return {"source": "small sizes", "error": "; ".join(tried + [f"{type(exc).__name__}: {str(exc)[:300]}"])}


def _worker(argv: list[str]) -> int:
    kind, path, result_file = argv[0], Path(argv[1]), Path(argv[2])
    if kind == "compose":
        record = work_compose(path, Path(argv[3]))
    else:
        small = json.loads(argv[3])
        record = work_launches(path, small, Path(argv[4]) if len(argv) > 4 and argv[4] else None)
    result_file.write_text(json.dumps(record, default=str), encoding="utf-8")
    return 0


def in_subprocess(args: list[str], timeout: float, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run this script as a worker; its record, or what went wrong (timeout, crash) with stderr's tail."""
    with tempfile.TemporaryDirectory(prefix="network-suite-") as tmp:
        result_file = Path(tmp) / "result.json"
        command = [sys.executable, str(Path(__file__).resolve()), "--worker", args[0], args[1], str(result_file),
                   *args[2:]]
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True, env={**os.environ, **(env or {})}, cwd=ROOT)
        try:
            _, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the worker's own session: it and its children only
            process.communicate()
            return {"timed_out": True, "wall_seconds": round(time.perf_counter() - started, 1),
                    "error": f"no result in {timeout:g} s (killed)"}
        wall = round(time.perf_counter() - started, 1)
        if process.returncode != 0 or not result_file.is_file():
            return {"timed_out": False, "wall_seconds": wall,
                    "error": f"worker exited {process.returncode}: {stderr.strip()[-600:]}"}
        return {"timed_out": False, "wall_seconds": wall, **json.loads(result_file.read_text(encoding="utf-8"))}


# -- the compose stage ------------------------------------------------------------------------------

def plan_kernels(message: str) -> int | None:
    """The composer's own count of kernels (its plan's fused groups, each one launch site or more), from its
    message "Composed N variant(s) of K kernel(s) for ..."; one kernel function may serve several groups."""
    match = re.search(r"of (\d+) kernel\(s\)", message)
    return int(match[1]) if match else None


def compose_row(number: int, path: Path, timeout: float, save: Path) -> dict[str, Any]:
    record = in_subprocess(["compose", str(path), str(save)], timeout)
    variants = record.get("variants") or []
    first = variants[0] if variants else {}
    if "error" in record:
        unsupported = ["timeout" if record["timed_out"] else "worker failed"]
        message = record["error"]
    else:
        unsupported, message = record["unsupported"], record["message"]
    return {
        "number": number, "name": path.stem, "composed": bool(record.get("composed")),
        "timed_out": record["timed_out"], "unsupported": unsupported, "message": message,
        "compose_seconds": record.get("seconds"), "wall_seconds": record["wall_seconds"],
        "variants": len(variants), "plan_kernels": plan_kernels(message) if variants else None,
        "kernels": first.get("kernels"),
        "bytes_max": max((v["bytes"] for v in variants), default=None),
        "guard_seconds_max": max((v.get("guard_seconds", 0) for v in variants), default=None),
        "kernels_launched": first.get("kernels_launched"),
        "launch_sites": first.get("launch_sites"), "launch_sites_in_loops": first.get("launch_sites_in_loops"),
        "variant_facts": variants,
    }


def launch_row(row: dict[str, Any], path: Path, timeout: float) -> dict[str, Any]:
    small = SMALL.get(row["number"], {})
    candidate = row["variant_facts"][0]["file"] if row["variant_facts"] else ""
    record = in_subprocess(["launches", str(path), json.dumps(small), candidate], timeout,
                           env={"TRITON_INTERPRET": "1"})
    return {"small_sizes": small, **record}


def parallel(jobs: int, function, items: list) -> list:
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(lambda item: function(*item), items))


# -- tables -----------------------------------------------------------------------------------------

def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def _lines(columns: tuple[str, ...], body: list[list[str]], left: set[str]) -> list[str]:
    from kfoundry.bench.table import aligned_lines

    return aligned_lines(columns, body, set(columns) - left)


def _launches(row: dict[str, Any]) -> str:
    launch = row.get("launch") or {}
    if "launches" not in launch:
        return "-" if not launch else "err"
    mark = "" if launch.get("source") == "file sizes" else "*"
    return f"{launch['launches']}{mark}"


def _why(row: dict[str, Any]) -> str:
    if row["composed"]:
        return "-"
    return ", ".join(row["unsupported"]) or row["message"][:100]


COLUMNS = ("#", "problem", "composed", "compose s", "variants", "kernels (plan/fns)", "bytes (max)",
           "guard s (max)", "launch sites (in loops)",
           "launches/fwd", "unsupported")


def table_lines(rows: list[dict[str, Any]]) -> list[str]:
    body = [[str(r["number"]), r["name"], "yes" if r["composed"] else "no",
             _cell(r["compose_seconds"] if r["compose_seconds"] is not None else f">{r['wall_seconds']}"),
             str(r["variants"]), "-" if r["kernels"] is None else f"{_cell(r.get('plan_kernels'))}/{r['kernels']}",
             _cell(r["bytes_max"]), _cell(r.get("guard_seconds_max")),
             "-" if r["launch_sites"] is None else f"{r['launch_sites']} ({r['launch_sites_in_loops']})",
             _launches(r), _why(r)] for r in rows]
    out = _lines(COLUMNS, body, {"problem", "composed", "unsupported"})
    if any((r.get("launch") or {}).get("source") == "small sizes" for r in rows):
        out.append("* launches of a variant composed at the small sizes (the file-size one did not run there)")
    return out


MERGED = ("#", "problem", "composed", "status", "eager ms", "compile ms", "ours ms", "vs eager", "vs compile",
          "reduce-overhead ms", "vs reduce-overhead", "graph", "kernels", "launch sites", "launches/fwd")


def merge(gpu: dict[str, Any], compose_doc: dict[str, Any]) -> list[dict[str, Any]]:
    by_name = {r["name"]: r for r in gpu.get("problems", [])}
    rows = []
    for c in compose_doc["problems"]:
        g = by_name.get(c["name"], {})
        rows.append({"number": c["number"], "name": c["name"], "composed": c["composed"], "status": g.get("status"),
                     "eager_ms": g.get("eager_ms"), "compile_ms": g.get("compile_ms"), "ours_ms": g.get("ours_ms"),
                     "speedup_eager": g.get("speedup_eager"), "speedup_compile": g.get("speedup_compile"),
                     "reduce_overhead_ms": g.get("reduce_overhead_ms"),
                     "speedup_reduce_overhead": g.get("speedup_reduce_overhead"), "graph": bool(g.get("graph_replays")),
                     "kernels": c["kernels"], "launch_sites": c["launch_sites"],
                     "launches": (c.get("launch") or {}).get("launches")})
    return rows


def merged_lines(rows: list[dict[str, Any]]) -> list[str]:
    def ms(v): return "-" if v is None else f"{v:.4g}"
    def x(v): return "-" if v is None else f"{v:.3f}x"
    body = [[str(r["number"]), r["name"], "yes" if r["composed"] else "no", _cell(r["status"]), ms(r["eager_ms"]),
             ms(r["compile_ms"]), ms(r["ours_ms"]), x(r["speedup_eager"]), x(r["speedup_compile"]),
             ms(r.get("reduce_overhead_ms")), x(r.get("speedup_reduce_overhead")), "yes" if r.get("graph") else "no",
             _cell(r["kernels"]), _cell(r["launch_sites"]), _cell(r["launches"])] for r in rows]
    return _lines(MERGED, body, {"problem", "composed", "status"})


def labels() -> dict[str, Any]:
    import torch
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {"host": platform.node(), "python": platform.python_version(), "torch": torch.__version__,
            "triton": triton_version, "cpus": os.cpu_count(), "device": "cpu (compose only; nothing timed)",
            "load_average_at_end": [round(v, 2) for v in os.getloadavg()],  # other work on the host slows compose
            **git_state()}


def git_state() -> dict[str, Any]:
    """The commit, and the files under src/ that differ from it (the composer is what is measured)."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            return ""
    changed = [line[3:] for line in git("status", "--porcelain", "--", "src").splitlines()]
    return {"commit": git("rev-parse", "HEAD").strip() or None, "src_changed_files": changed}


def stamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")


def write(path: Path, document: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, default=str) + "\n", encoding="utf-8")
    return path


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", default=None, help="pick problems by leading number, e.g. 1-6,10")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds for one problem's compose (120)")
    parser.add_argument("--jobs", type=int, default=2, help="problems composed at once (2)")
    parser.add_argument("--launches", action="store_true", help="count launches per forward at the small sizes")
    parser.add_argument("--launch-timeout", type=float, default=300.0, help="seconds for one launch count (300)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the variants' sources go")
    parser.add_argument("--merge", type=Path, default=None, help="a programmatic_suite.py JSON of this suite")
    parser.add_argument("--compose", type=Path, default=None, help="with --merge: this script's compose JSON")
    parser.add_argument("--json", type=Path, default=None, help="where the JSON goes")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:
        return _worker(argv[1:])
    args = parse_args(argv)
    created = stamp()
    if args.merge:
        if args.compose is None:
            print("error: --merge needs --compose COMPOSE.json", file=sys.stderr)
            return 2
        gpu, composed = (json.loads(p.read_text(encoding="utf-8")) for p in (args.merge, args.compose))
        rows = merge(gpu, composed)
        document = {"format": FORMAT, "stage": "merged", "created_utc": created,
                    "command": ["python", "benchmarks/network_suite/run.py", *argv], "gpu_labels": gpu.get("labels"),
                    "gpu_summary": gpu.get("summary"), "compose_created_utc": composed.get("created_utc"),
                    "problems": rows}
        print("\n".join(merged_lines(rows)))
        path = write(args.json or RESULTS_DIR / f"network_suite-merged-{created}.json", document)
        print(f"written: {path}")
        return 0
    from kfoundry.errors import KFoundryError

    try:
        chosen = problems(args.problems)
    except KFoundryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    save = args.out / created
    started = time.perf_counter()

    def one(number: int, path: Path) -> dict[str, Any]:
        row = compose_row(number, path, args.timeout, save)
        print(f"composed {path.stem}: {'yes' if row['composed'] else 'no'} ({row['wall_seconds']} s)",
              file=sys.stderr, flush=True)
        return row

    rows = parallel(args.jobs, one, chosen)
    if args.launches:
        paths = dict(chosen)

        def count(row: dict[str, Any]) -> dict[str, Any]:
            row["launch"] = launch_row(row, paths[row["number"]], args.launch_timeout)
            print(f"launches {row['name']}: {_launches(row)}", file=sys.stderr, flush=True)
            return row

        rows = parallel(args.jobs, count, [(r,) for r in rows])
    name = "network_suite-compose-cpu"  # the stage (with or without launches) is in the document
    document = {"format": FORMAT, "stage": "compose" + ("+launches" if args.launches else ""),
                "created_utc": created, "command": ["python", "benchmarks/network_suite/run.py", *argv],
                "settings": {"max_variants": MAX_VARIANTS, "tolerance": TOLERANCE, "timeout_s": args.timeout,
                             "jobs": args.jobs, "launch_timeout_s": args.launch_timeout if args.launches else None,
                             "sources": str(save)},
                "labels": labels(), "total_seconds": round(time.perf_counter() - started, 1),
                "summary": {"problems": len(rows), "composed": sum(r["composed"] for r in rows),
                            "timed_out": [r["name"] for r in rows if r["timed_out"]]},
                "problems": rows}
    print("\n".join(table_lines(rows)))
    print(f"composed {document['summary']['composed']} of {len(rows)}; timed out: "
          f"{', '.join(document['summary']['timed_out']) or 'none'}; {document['total_seconds']} s in all")
    path = write(args.json or RESULTS_DIR / f"{name}-{created}.json", document)
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
