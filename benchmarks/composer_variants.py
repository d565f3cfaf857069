"""Every variant the composer writes for some suite problems, timed on one GPU: a quick look at the templates
without a search (no evaluator, no guard, no tuner).

For each problem: compose up to --max-variants candidates, then one worker process per problem (composed code
never runs in this process) builds the Model and each ModelNew from the same seed, checks each output against
the float64 truth the way the evaluator does (error ratio within max(1, 2 x the fp32 reference's), atol = rtol =
--tolerance), and times eager, torch.compile (with --compile) and every variant with triton.testing.do_bench
(median of its repetitions). The evaluator's own timing is what a bench reports; this is for comparing templates.

    python benchmarks/composer_variants.py --problems 5,16-22 [--max-variants 8] [--compile] [--json PATH]
        [--tolerance 1e-4] [--timeout 600] [--conv-grid] [--suite benchmarks/conv_suite] [--graph]
        [--rounding device|fp32] [--row-modes]

--rounding device (the default) composes as an optimize run on this machine does: where cuDNN's fp32
convolutions run TF32 here (a GPU of compute capability 8 or more, PyTorch's defaults), the composer is told the
reference rounds like TF32 and puts the fast main loops first after a norm; fp32 composes as for an fp32
reference (TF32x3 first after a norm), the composer's order before the judge reported the reference's rounding.

--row-modes adds, beside each variant with a row kernel in a nested mode (a scalar loop over a norm's outer
reduced coordinates), the same genome with those kernels' flat loop (one flat column index per lane, divided into
coordinates; split rows stay split) at the same block and warps: the two row modes side by side in one run.

--graph adds, for eager, torch.compile and every variant, the kernels one forward launches and its time replayed
as one CUDA graph: the difference from the plain time is the host's launch path.

Prints one table (problem, variant, ms, x eager, x compile, error ratio, ok) and writes JSON.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
SUITE = ROOT / "benchmarks" / "suite"
RESULTS_DIR = ROOT / "benchmarks" / "results"


def suite_problems(selection: str, suite: Path = SUITE) -> list[Path]:
    from kfoundry.bench.suite import parse_selection

    wanted = parse_selection(selection)
    found = {}
    for path in sorted(suite.glob("*.py")):
        head = path.stem.split("_", 1)[0]
        if head.isdigit() and int(head) in wanted:
            found[int(head)] = path
    return [found[n] for n in sorted(found)]


def _flat(outputs) -> list:
    """A forward's tensors, in order, whether it returns one or a tuple / list of them."""
    return [t for o in outputs for t in _flat(o)] if isinstance(outputs, (tuple, list)) else [outputs]


def worker(problem: Path, candidates: list[Path], do_compile: bool, tolerance: float, graph: bool = False) -> dict:
    import torch
    from triton.testing import do_bench

    from kfoundry.evaluate.reference.compare import error_ratio
    from kfoundry.problem import (
        build_model,
        init_inputs_of,
        load_module,
        load_problem_module,
        make_inputs,
        read_problem,
    )

    module = load_problem_module(read_problem(problem))
    init = init_inputs_of(module)
    device = "cuda"
    inputs = make_inputs(module, 0, torch.float32, device)

    def device_events(fn, calls: int):
        """The device events (kernels, copies) of `calls` forwards, from torch.profiler."""
        from torch.profiler import ProfilerActivity, profile

        with torch.no_grad(), profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn(*inputs)
            torch.cuda.synchronize()
        return [e for e in prof.key_averages()
                if (getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0))
                and not e.key.startswith("cuda")]

    def kernels(fn) -> dict[str, float]:
        """Device ms per call of each kernel the forward launches (5 calls)."""
        out = {}
        for event in device_events(fn, 5):
            total = getattr(event, "device_time_total", None) or getattr(event, "cuda_time_total", 0)
            name = event.key[:60]  # kernels sharing these characters are summed, not overwritten
            out[name] = round(out.get(name, 0.0) + total / 5 / 1000, 4)
        return dict(sorted(out.items(), key=lambda kv: -kv[1])[:6])

    def bench(fn) -> float:
        with torch.no_grad():
            return float(do_bench(lambda: fn(*inputs), warmup=50, rep=300, return_mode="median"))

    def launches(fn) -> int:
        """Kernels one forward launches."""
        return sum(e.count for e in device_events(fn, 1))

    def graphed(fn) -> float:
        """The forward captured once as a CUDA graph and replayed: its time without the host's launch path."""
        with torch.no_grad():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):  # Triton compiles and autotunes outside the capture
                    fn(*inputs)
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn(*inputs)
            return float(do_bench(g.replay, warmup=50, rep=300, return_mode="median"))

    def host_view(fn, row: dict) -> None:
        if not graph:
            return
        row["launches"] = launches(fn)
        try:
            row["graph_ms"] = graphed(fn)
        except Exception as exc:  # noqa: BLE001 -- a forward that cannot be captured still has its other figures
            row["graph_failure"] = f"{type(exc).__name__}: {str(exc)[:200]}"

    model = build_model(module.Model, init, 0, torch.float32, device, False)
    with torch.no_grad():
        reference = model(*inputs)
        truth_model = build_model(module.Model, init, 0, torch.float64, device, False)
        truth = truth_model(*[t.double() if t.is_floating_point() else t for t in inputs])
    del truth_model

    def worst_error(got) -> float:
        """The largest error ratio of the float outputs against the float64 truth; an integer output (an
        argmax) that differs anywhere from the fp32 reference's counts as infinitely wrong."""
        worst = 0.0
        for mine, true, ref in zip(_flat(got), _flat(truth), _flat(reference), strict=True):
            if true.is_floating_point():
                worst = max(worst, error_ratio(mine.float(), true.float(), tolerance, tolerance))
            elif not torch.equal(mine, ref):
                worst = float("inf")
        return worst

    ref_error = worst_error(reference)
    out = {"problem": problem.stem, "eager_ms": bench(model), "compile_ms": None, "reference_error": ref_error,
           "variants": [], "eager_kernels": kernels(model)}
    eager_view: dict = {}
    host_view(model, eager_view)
    out.update({f"eager_{k}": v for k, v in eager_view.items()})
    if do_compile:
        try:
            compiled = torch.compile(model)
            out["compile_ms"] = bench(compiled)
            out["compile_kernels"] = kernels(compiled)
            compile_view: dict = {}
            host_view(compiled, compile_view)
            out.update({f"compile_{k}": v for k, v in compile_view.items()})
            del compiled
        except Exception as exc:  # noqa: BLE001 -- the variants are still worth timing
            out["compile_failure"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    for path in candidates:
        row = {"variant": path.stem}
        try:
            cand = load_module(path, path.read_text(), f"cand_{path.stem[:2]}").ModelNew
            new = build_model(cand, init, 0, torch.float32, device, False)
            with torch.no_grad():
                got = new(*inputs)
            torch.cuda.synchronize()
            row["error"] = worst_error(got)
            row["ok"] = row["error"] <= max(1.0, 2 * ref_error)
            row["ms"] = bench(new)
            row["kernels"] = kernels(new)
            host_view(new, row)
        except Exception as exc:  # noqa: BLE001 -- one failing variant must not hide the others
            row["failure"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        out["variants"].append(row)
        print(json.dumps({"progress": problem.stem, **row}), file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", default="5,16-22")
    parser.add_argument("--suite", type=Path, default=SUITE, help="the folder of numbered problems (benchmarks/suite)")
    parser.add_argument("--max-variants", type=int, default=8)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--graph", action="store_true",
                        help="also count each forward's kernels and time it replayed as one CUDA graph (graph_ms):"
                             " how much of its time is the host's launch path")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--conv-grid", action="store_true",
                        help="replace the composer's convolution configurations by CONV_GRID (exploration)")
    parser.add_argument("--rounding", choices=("device", "fp32"), default="device",
                        help="how the composer is told the reference rounds: as the judge sees it on this machine "
                             "(device), or as an fp32 reference (fp32)")
    parser.add_argument("--row-modes", action="store_true",
                        help="beside each variant with nested row kernels, the same with flat row loops")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        problem, *candidates = (Path(p) for p in args.worker)
        print(json.dumps(worker(problem, candidates, args.compile, args.tolerance, args.graph)))
        return 0

    from kfoundry.experts.composer import compose

    if args.conv_grid:
        use_conv_grid()
    rounding = reference_rounding(args.rounding)
    command = ["python", "benchmarks/composer_variants.py", *(sys.argv[1:] if argv is None else argv)]
    results = []
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out_path = args.json or RESULTS_DIR / f"composer_variants-{stamp}.json"

    def save() -> None:  # after every problem: a call cut short keeps what it finished
        out_path.write_text(json.dumps({"created_utc": stamp, "command": command,
                                        "device": device_label(), "tolerance": args.tolerance,
                                        "suite": str(args.suite), "rounding": asdict(rounding),
                                        "results": results}, indent=1))

    for problem in suite_problems(args.problems, args.suite):
        composed = compose(problem, max_variants=args.max_variants, tolerance=args.tolerance, reference=rounding)
        if not composed.candidates:
            print(f"{problem.stem}: {composed.message}", flush=True)
            results.append({"problem": problem.stem, "failure": composed.message})
            save()
            continue
        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            for i, c in enumerate(composed.candidates):
                layout = next((k["layout"] for k in c.config.values() if "layout" in k), "")
                path = Path(tmp) / f"{i:02d}_{c.name}{'_' + layout if layout else ''}.py"
                path.write_text(c.source)
                paths.append(path)
                flat = flat_rows(composed.space, c.genome) if args.row_modes else None
                if flat is not None:
                    paths.append(Path(tmp) / f"{i:02d}_{c.name}_flat_rows.py")
                    paths[-1].write_text(flat)
            cmd = [sys.executable, __file__, "--tolerance", str(args.tolerance), "--worker", str(problem),
                   *map(str, paths)] + (["--compile"] if args.compile else []) + (["--graph"] if args.graph else [])
            try:
                done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=args.timeout)
            except subprocess.TimeoutExpired:
                results.append({"problem": problem.stem, "failure": f"timed out after {args.timeout:.0f} s"})
                save()
                continue
        if done.returncode != 0:
            results.append({"problem": problem.stem, "failure": done.stderr[-2000:]})
            print(f"{problem.stem}: worker failed\n{done.stderr[-2000:]}", flush=True)
            save()
            continue
        result = json.loads(done.stdout.strip().splitlines()[-1])
        results.append(result)
        print_problem(result)
        save()
    save()
    print(f"wrote {out_path}")
    return 0


# (BM, BN, BK, num_warps, num_stages, precision, layout): tiles a Hopper TF32 implicit GEMM might like; on a
# transposed convolution "channels_last" reads "phases", and one with few channels per group keeps its own list
CONV_GRID = [
    (128, 128, 32, 8, 3, "tf32", "channels_last"),
    (256, 128, 32, 8, 3, "tf32", "channels_last"),
    (64, 128, 32, 4, 4, "tf32", "channels_last"),
    (128, 64, 32, 4, 4, "tf32", "channels_last"),
    (256, 64, 32, 8, 3, "tf32", "channels_last"),
    (128, 256, 32, 8, 3, "tf32", "channels_last"),
    (128, 128, 32, 4, 3, "tf32", "channels_last"),
    (128, 128, 32, 8, 3, "tf32", "taps"),
    (256, 128, 32, 8, 3, "tf32", "taps"),
    (128, 64, 32, 4, 4, "tf32", "taps"),
]


def flat_rows(space, genome) -> str | None:
    """The genome's candidate with every nested row kernel looping flat (same BR, BC, warps; a split one split as
    the composer would split it); None where it has none or the space holds no such twin."""
    from kfoundry.experts.composer.genome import Genome

    if space is None or genome is None:
        return None
    flat_mode = {"nested": "looped", "nested_split": "split"}
    configs = {}
    for name, config in genome.configs.items():
        if config.get("mode") not in flat_mode:
            configs[name] = config
            continue
        same = {k: config[k] for k in ("BR", "BC", "num_warps")}
        twin = [c for c in space.options[genome.plan][name]
                if c.get("mode") == flat_mode[config["mode"]] and all(c.get(k) == v for k, v in same.items())]
        if not twin:
            return None
        configs[name] = twin[0]
    if configs == genome.configs:
        return None
    built = space.build(Genome(genome.plan, configs, genome.graph))
    return None if isinstance(built, str) else built[0]


def use_conv_grid() -> None:
    from kfoundry.experts.composer.templates import conv

    original = conv.configs

    def grid(group, precision="fp32", tolerance=None, device=None, normalised=False, reference=None):
        if group.reduced or normalised or not (conv.channels_last_fits(group) or conv.phases_fit(group)):
            return original(group, precision, tolerance, device, normalised=normalised, reference=reference)
        cout = conv.channels_per_group(group)[1]
        out = []
        for bm, bn, bk, w, s, p, layout in CONV_GRID:
            if conv.phases_fit(group):
                if layout != "channels_last":
                    continue
                layout = "phases"
            config = conv._narrow({"BM": bm, "BN": bn, "BK": bk, "GROUP_M": 8, "num_warps": w, "num_stages": s},
                                  cout)
            config.update(precision=p, layout=layout)
            if config not in out:
                out.append(config)
        return out

    conv.configs = grid


def reference_rounding(mode: str):
    """What the composer is told of the reference's rounding: on this machine's first GPU as the judge would
    report it (its convolutions' TF32; e(r) is left out, the worker measures it after composing), or an fp32
    reference's."""
    import torch

    from kfoundry.evaluate.reference.judge_job import convs_run_tf32
    from kfoundry.types import ReferenceRounding

    if mode == "fp32" or not torch.cuda.is_available():
        return ReferenceRounding()
    return ReferenceRounding(conv_tf32=convs_run_tf32("cuda:0"))


def device_label() -> str:
    import torch
    import triton

    name = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    return f"{name}, torch {torch.__version__}, triton {triton.__version__}"


def print_problem(result: dict) -> None:
    eager, compiled = result["eager_ms"], result["compile_ms"]
    print(f"\n{result['problem']}: eager {eager:.4f} ms, torch.compile "
          f"{'n/a' if compiled is None else f'{compiled:.4f} ms'}, reference error ratio "
          f"{result['reference_error']:.3g}")
    print("  eager kernels: " + ", ".join(f"{k} {v:.3f}" for k, v in result.get("eager_kernels", {}).items()))
    if result.get("compile_kernels"):
        print("  compile kernels: " + ", ".join(f"{k} {v:.3f}" for k, v in result["compile_kernels"].items()))
    if result.get("compile_failure"):
        print(f"  torch.compile failed: {result['compile_failure']}")
    for who in ("eager", "compile"):
        if f"{who}_launches" in result:
            print(f"  {who}: {result[f'{who}_launches']} launches, as a CUDA graph "
                  f"{result.get(f'{who}_graph_ms', float('nan')):.4f} ms {result.get(f'{who}_graph_failure', '')}")
    print(f"  {'variant':58} {'ms':>9} {'x eager':>8} {'x compile':>9} {'error':>8}  ok")
    for row in result["variants"]:
        if "failure" in row:
            print(f"  {row['variant']:58} failed: {row['failure'][:150]}")
            continue
        vs_compile = f"{compiled / row['ms']:.3f}" if compiled else "n/a"
        print(f"  {row['variant']:58} {row['ms']:9.4f} {eager / row['ms']:8.3f} {vs_compile:>9} "
              f"{row['error']:8.3g}  {'yes' if row['ok'] else 'NO'}")
        print("      " + ", ".join(f"{k} {v:.3f}" for k, v in row.get("kernels", {}).items()))
        if "launches" in row:
            print(f"      {row['launches']} launches, as a CUDA graph "
                  f"{row.get('graph_ms', float('nan')):.4f} ms {row.get('graph_failure', '')}")
    sys.stdout.flush()


if __name__ == "__main__":
    raise SystemExit(main())
