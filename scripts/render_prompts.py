"""The prompt showcase: every LLM expert's prompt for five problems of different classes (a scan, a GEMM with an
epilogue, a convolution with a pooling, a convolution with a GroupNorm and a pooling, a causal self-attention),
rendered into a folder as markdown files.

    python scripts/render_prompts.py [--out DIR] [--backend triton|cuda] [--target-gpu NAME]

Default --out is tests/fixtures/prompts/rendered, the golden files: tests/test_render_prompts_script.py fails when a
prompt changes and the golden files were not rendered again, so every prompt change is reviewed as a diff.

What the prompts are rendered from is fixed, so they are the same on every machine: the problems and their parent
kernels under tests/fixtures/prompts/ (the scan and the GEMM are benchmarks/coverage/2_masked_cumsum.py and
benchmarks/suite/10_linear_gelu_scale.py; the conv + GroupNorm and the attention problems are from benchmarks/conv_suite
and benchmarks/network_suite; the three convs' and the attention's parents are the composer's first two candidates at
the sizes tested, the others' lie under tests/fixtures/prompts/parents; the parents' verdicts are stated below, as a CPU run would give them, and
diagnosed by the real diagnosis engine), the sizes a CPU run would test (--set values), the inputs drawn as the judge
draws them, experience retrieved from a fresh seed library, and the target GPU's datasheet figures (this showcase
stands for a CPU run). The initializer is rendered once per island of a 3-island search.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

FIXTURES = ROOT / "tests" / "fixtures" / "prompts"
DEFAULT_OUT = FIXTURES / "rendered"
ISLANDS = 3
# problem -> the sizes a CPU run tests it at (--set)
PROBLEMS = {
    "masked_cumsum": {"batch_size": 4, "length": 1000},
    "linear_gelu_scale": {"batch_size": 8, "in_features": 64, "out_features": 32},
    "conv_maxpool_relu": {"batch_size": 2, "in_channels": 4, "out_channels": 8, "size": 16},
    "conv_groupnorm_pool": {"batch_size": 2, "in_channels": 4, "out_channels": 8, "height": 18, "width": 18,
                            "num_groups": 2},
    "causal_attention": {"batch_size": 2, "seq_len": 32, "n_embd": 64, "n_head": 4, "block_size": 64},
}
PROBLEM_FILES = {"masked_cumsum": ROOT / "benchmarks" / "coverage" / "2_masked_cumsum.py",
                 "linear_gelu_scale": ROOT / "benchmarks" / "suite" / "10_linear_gelu_scale.py",
                 "conv_groupnorm_pool": ROOT / "benchmarks" / "conv_suite" / "14_conv2d_groupnorm_scale_maxpool_clamp.py",
                 "causal_attention": ROOT / "benchmarks" / "network_suite" / "10_mingpt_causal_attention.py",
                 }  # else fixtures
# the parents of these are the composer's first two candidates
COMPOSED_PARENTS = ("conv_maxpool_relu", "conv_groupnorm_pool", "causal_attention")
# the second parent crossover is shown: the first with other launch settings
SECOND_PARENT = {
    "masked_cumsum": ("BLOCK=1024", "BLOCK=256"),
    "linear_gelu_scale": ("BK=64, GROUP_M=8, num_warps=8, num_stages=3", "BK=32, GROUP_M=8, num_warps=8, num_stages=4"),
}


def _verdict(source: str, status: str, name: str):
    """A parent's evaluation as a CPU run records it (`ok`: correct, not timed; otherwise wrong output on the first
    trial) at the run's --set sizes, its fp32 dots emulated as on a GPU (none in these parents: fp16 or none), with
    the real diagnosis of it."""
    from kfoundry.diagnose import diagnose
    from kfoundry.types import CorrectnessReport, Evaluation, TimingReport

    ok = status == "ok"
    correctness = CorrectnessReport(trials=5, trials_passed=5 if ok else 0, seeds=[1, 2, 3, 4, 5], tolerance=1e-4,
                                    precision="fp32", max_abs_error=3.1e-6 if ok else 0.84,
                                    max_rel_error=None if ok else 2.6, mismatch_fraction=None if ok else 0.031,
                                    failed_trial=None if ok else 0, failed_output=None if ok else 0)
    message = ("correct on 5 trials (fp32, atol=rtol=0.0001, max abs error 3.1e-06); not timed (no GPU: the "
               "interpreter is not a performance measurement)" if ok else
               "wrong output on trial 0: 3.1% of the elements off, max abs error 0.84")
    evaluation = Evaluation(status=status, message=message, phase="timing" if ok else "correctness",
                            correctness=correctness, device="cpu",
                            timing=TimingReport(reason="not timed: no GPU (Triton's interpreter)"),
                            settings={"set": dict(PROBLEMS[name])},
                            precision={"checked": "cpu", "dots": {"emulated": {}, "exact": {}}})
    evaluation.diagnosis = diagnose(evaluation, source)
    return evaluation


def _parents(name: str) -> dict[str, list]:
    """Per expert kind, the parents it is shown: repair a failing one, the improvers a working one, crossover two."""
    from kfoundry.experts import ParentInfo

    if name in COMPOSED_PARENTS:
        from kfoundry.experts.composer import compose

        path = PROBLEM_FILES.get(name, FIXTURES / "problems" / f"{name}.py")
        composed = compose(path, set_values=PROBLEMS[name], max_variants=2, tolerance=1e-4)
        sources = [c.source for c in composed.candidates[:2]]
    else:
        first = (FIXTURES / "parents" / f"{name}.py").read_text(encoding="utf-8")
        old, new = SECOND_PARENT[name]
        sources = [first, first.replace(old, new)]
    working = [ParentInfo.from_evaluation(s, _verdict(s, "ok", name), path=f"candidate {i + 1}")
               for i, s in enumerate(sources)]
    failing = ParentInfo.from_evaluation(sources[0], _verdict(sources[0], "wrong_output", name), path="candidate 3")
    return {"repair": [failing], "improve": working[:1], "crossover": working}


def render_showcase(out: Path, backend: str = "triton", target_gpu: str = "H200") -> list[Path]:
    """Write the showcase into `out` (system prompts in out/system/, user prompts in out/PROBLEM/); returns the
    files written."""
    from kfoundry.evaluate.shared.device_facts import prompt_device
    from kfoundry.types import DeviceFacts

    device = prompt_device(DeviceFacts(kind="cpu", name="the showcase's CPU"), target_gpu)
    texts: dict[Path, str] = {}  # every file is rendered before any is written: a failure leaves the old ones

    def write(path: Path, text: str) -> None:
        texts[path] = text

    systems: dict[str, str] = {}
    # retrieval by signature and text alone, as where kfoundry[embeddings] is not installed: the same everywhere
    semantic = os.environ.get("KFOUNDRY_SEMANTIC_RETRIEVAL")
    os.environ["KFOUNDRY_SEMANTIC_RETRIEVAL"] = "0"
    try:
        _render_problems(out, backend, device, systems, write)
    finally:
        if semantic is None:
            os.environ.pop("KFOUNDRY_SEMANTIC_RETRIEVAL")
        else:
            os.environ["KFOUNDRY_SEMANTIC_RETRIEVAL"] = semantic
    for key, system in sorted(systems.items()):
        write(out / "system" / f"{backend}_{key}.md", system)
    for folder in ["system", *PROBLEMS]:  # an expert or problem no longer shown leaves no stale file behind
        for stale in (out / folder).glob("*.md"):
            stale.unlink()
    for path, text in texts.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return list(texts)


def _render_problems(out: Path, backend: str, device, systems: dict[str, str], write) -> None:
    from kfoundry.experts import EXPERTS, PromptContext, render
    from kfoundry.experts.llm_expert import attempt_text
    from kfoundry.experts.roofline_text import estimate
    from kfoundry.experts.strategies import assignment
    from kfoundry.input_facts import problem_facts
    from kfoundry.library import Library
    from kfoundry.optimize.experience import Experience
    from kfoundry.problem_signature import problem_class, signature

    with tempfile.TemporaryDirectory() as scratch:
        for name, set_values in PROBLEMS.items():
            path = PROBLEM_FILES.get(name, FIXTURES / "problems" / f"{name}.py")
            sig = signature(path, set_values)
            with Library(Path(scratch) / f"{name}.sqlite") as library:
                experience = Experience(library, sig, "showcase", None).retrieve(5)
            context = PromptContext(
                problem_source=path.read_text(encoding="utf-8"), problem_name=name, backend=backend, device=device,
                experience=experience, problem_class=problem_class(sig), timed=False, trials=5,
                facts=problem_facts(path, set_values, outputs=sig.get("outputs")),
                roofline=estimate(path, "fp32", None, device))
            parents = _parents(name)
            for expert in EXPERTS.values():
                shown = ([] if not expert.needs_parent else parents["crossover"] if expert.all_parents
                         else parents["repair"] if expert.traits.repair else parents["improve"])
                islands = range(ISLANDS) if expert.traits.starts else [None]
                for island in islands:
                    step = replace(context, parents=shown, attempt=attempt_text(
                        expert.name, 1, bool(shown), bool(shown) and shown[0].status != "ok", island or 0,
                        "the showcase asks each expert once"))
                    label = expert.name
                    if island is not None:
                        step.strategy, step.other_strategies = assignment(step.problem_class, island, ISLANDS,
                                                                          step.facts)
                        label = f"{expert.name}_island{island}"
                    system, user = render(expert.name, step)
                    key = "edits" if expert.edits_allowed and expert.needs_parent else "whole"
                    systems[key] = system
                    write(out / name / f"{label}.md", user)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder to write (default: the golden files)")
    parser.add_argument("--backend", default="triton", choices=["triton", "cuda"])
    parser.add_argument("--target-gpu", default="H200", help="the GPU whose datasheet figures the prompts show")
    args = parser.parse_args(argv)
    written = render_showcase(args.out, args.backend, args.target_gpu)
    print(f"{len(written)} prompt files written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
