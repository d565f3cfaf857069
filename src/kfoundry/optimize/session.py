"""The wiring of one optimize run, apart from running it (kfoundry.optimize.driver): the run store, new or
resumed, with the settings it keeps; the LLM, rebuilt on --resume from the settings the run stored (the
keys still come from the environment or [keys], and are never stored); and, once the reference is
prepared, the evaluator, the experts, the router, the islands, the stop rules and the loop."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from kfoundry.errors import UsageError
from kfoundry.evaluate import EvalOptions, Evaluator
from kfoundry.evaluate.shared.device_facts import prompt_device
from kfoundry.evaluate.parent.options import resolve_device
from kfoundry.experts import PromptContext, Router, registry
from kfoundry.llm.settings import LLMSettings
from kfoundry.optimize.settings import OptimizeSettings
from kfoundry.problem import read_source
from kfoundry.runs import RunStore
from kfoundry.search import Archipelago, SearchLoop, StopRules
from kfoundry.search.individual import source_hash

if TYPE_CHECKING:  # kfoundry.run_config imports this package's settings: at call time only
    from kfoundry.run_config import RunConfig


def problem_name(problem: Path) -> str:
    """`examples/softmax/problem.py` -> "softmax": a file named problem.py is named by its folder."""
    return problem.parent.name if problem.stem == "problem" and problem.parent.name else problem.stem


def _default_out(problem: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path.cwd() / "runs" / f"{problem_name(problem)}-{stamp}"


def make_llm(specs: list[str], stored: LLMSettings | None = None) -> tuple[Any, Any, LLMSettings]:
    """The providers of `specs` and the budget, built with `stored` (a run's own LLM settings) or else
    with those in force (the environment and kfoundry.toml); and the settings they were built with. The
    keys always come from the environment or [keys]."""
    from kfoundry.config import build_run_config, load_settings
    from kfoundry.generate import make_llm as build

    found = load_settings({})
    llm = stored if stored is not None else build_run_config(found).llm
    client, budget = build(specs, llm, found.api_keys)
    return client, budget, llm


@dataclass
class Session:
    problem: Path
    store: RunStore
    config: RunConfig  # what the store keeps
    seeds: list[Path] = field(default_factory=list)
    llm: Any = None
    budget: Any = None
    resumed: bool = False
    joined_cluster: bool = False  # this run connected to Ray (and so leaves it at the end), not its caller

    @property
    def settings(self) -> OptimizeSettings:
        return self.config.search

    @property
    def options(self) -> EvalOptions:
        return self.config.eval

    # -- what runs the search ------------------------------------------------------------------------

    def evaluator(self, progress: Any) -> tuple[Any, int]:
        """One worker (the default), one per local device (--devices), or Ray actors (--cluster)."""
        s = self.settings
        # the run's folder and the library, wherever they are, stay closed to candidates
        private = [str(self.store.run_dir)] + ([s.library] if s.library and s.library != "off" else [])
        self.config.eval = replace(self.options, private_paths=tuple(dict.fromkeys(
            [*self.options.private_paths, *private])))
        if self.llm is not None and resolve_device(self.options.device, self.options.precision) == "cpu":
            # the prompts' diagnoses then give each kernel's registers and shared memory on the target GPU
            self.config.eval = replace(self.options, static_target=prompt_device(None, s.target_gpu).compute_capability)
        if s.cluster:
            from kfoundry.distributed import RayEvaluator, connect, require_ray

            self.joined_cluster = not require_ray().is_initialized()
            connect(s.cluster)
            evaluator = RayEvaluator(self.problem, self.options)
            return evaluator, evaluator.workers
        if s.devices:
            from kfoundry.evaluate.parent.pool import EvaluatorPool, parse_devices

            evaluator = EvaluatorPool(self.problem, self.options, parse_devices(s.devices), progress=progress)
            return evaluator, len(evaluator.devices)
        return Evaluator(self.problem, self.options, progress=progress), 1

    def stop_rules(self) -> StopRules:
        s = self.settings
        return StopRules(max_evals=s.max_evals, max_cost=s.max_cost, max_time_s=s.max_time_s,
                         target_speedup=s.target_speedup, stagnation_generations=s.stagnation,
                         max_generations=s.max_generations, target_roofline=s.target_roofline)

    def archipelago(self) -> Archipelago:
        s = self.settings
        return Archipelago(k=s.islands, topology=s.topology, migrate_every=s.migrate_every, capacity=s.capacity,
                           selection=s.selection)

    def experts(self, *, problem_source: str, name: str, device: Any, experience: list[dict[str, Any]],
                archipelago: Archipelago, left_over: list[str], preferred: dict[str, int],
                problem_class: str = "other", facts: Any = None, timed: bool = False, space: Any = None,
                move_gains: dict[str, float] | None = None,
                baseline_ms: Callable[[str], float | None] | None = None) -> list[Any]:
        """The tuner always; the composer while it has kernels the first population left (`left_over`); the
        genome experts where the composer gave its genome `space`; the LLM experts with an LLM. `baseline_ms`
        (a baseline's median by now, or None) puts eager and torch.compile times in the prompts' roofline line;
        given only where they are timed at the problem file's own sizes on the device the prompts name."""
        from kfoundry.experts.composer.templates.device_limits import kernel_target  # the tuner's limits

        s, o = self.settings, self.options
        shown_device = prompt_device(device, s.target_gpu)
        roofline = None
        if self.llm is not None:  # what every kernel-writing prompt starts from, at the file's own sizes
            from kfoundry.experts.roofline_text import estimate

            roofline = estimate(self.problem, o.precision, o.tolerance, shown_device, o.eval_mode)
        context = PromptContext(problem_source=problem_source, problem_name=name, backend=s.backend,
                                device=shown_device,
                                precision=o.precision, tolerance=o.tolerance, policy=o.policy, experience=experience,
                                problem_class=problem_class, facts=facts, timed=timed, trials=o.trials,
                                roofline=roofline, baseline_ms=baseline_ms if not o.set_values else None)
        return registry.build(registry.Setup(
            context=context, llm=self.llm, budget=self.budget, device=kernel_target(device, s.target_gpu), seed=s.seed,
            is_known=lambda source: source_hash(source) in archipelago.seen, composed=left_over,
            preferred=preferred, prompts_dir=self.store.run_dir / "prompts", space=space,
            move_gains=dict(move_gains or {}),
            elites=lambda: [best for island in archipelago.islands if (best := island.best()) is not None]))

    def near_duplicates(self, status: Any) -> Any:
        if self.settings.reject_similar is None:
            return None
        from kfoundry.library.embeddings import Embedder, code_text
        from kfoundry.search.near_duplicates import NearDuplicateFilter

        status("loading the code-embedding model (--reject-similar)")
        return NearDuplicateFilter(self.settings.reject_similar, Embedder().load(), prepare=code_text)

    def loop(self, archipelago: Archipelago, queue: Any, experts: list[Any], workers: int, **hooks: Any) -> SearchLoop:
        """`hooks`: on_event, cost_fn, identify, dropped, near_duplicates (SearchLoop's)."""
        s = self.settings
        # the pipeline: every worker busy, a couple of proposals ready
        return SearchLoop(archipelago, queue, Router(experts, seed=s.seed), self.stop_rules(),
                          concurrency=max(s.concurrency, workers + 2), seed=s.seed, **hooks)


def _override(settings: OptimizeSettings, overrides: dict[str, Any]) -> None:
    for key, value in overrides.items():
        if value is not None:
            if not hasattr(settings, key):
                raise UsageError(f"unknown optimize setting {key!r}")
            setattr(settings, key, value)


def open_session(problem: str | Path | None = None, *, out: str | Path | None = None,
                 resume: str | Path | None = None, config: RunConfig | None = None,
                 options: EvalOptions | None = None, settings: OptimizeSettings | None = None,
                 llm: list[str] | None = None, seeds: list[str | Path] = (), llm_client: Any = None,
                 budget: Any = None, **overrides: Any) -> Session:
    """A new run's store (everything checked before its folder exists), or a stopped run's, with the
    config it stored. A new run takes `config` whole (what the command line builds), or else its
    `settings` and `options` sections, with `overrides` of the search settings and `llm` specs;
    `llm_client` is what `config.llm` built, or None to build it here."""
    from kfoundry.run_config import RunConfig

    if resume is not None:
        store = RunStore.open(resume)
        config = RunConfig.from_dict(store.settings)
        _override(config.search, overrides)  # a resumed run's budget may grow
        config.validate()
        if llm_client is None and config.search.llm:
            # a run stored before its LLM settings were kept takes today's, as it did
            llm_client, budget, _ = make_llm(config.search.llm, config.llm)
        return Session(Path(resume) / "problem.py", store, config, [], llm_client, budget, resumed=True)
    if problem is None:
        raise UsageError("a problem file is needed (or --resume RUN_DIR)")
    problem_path = Path(problem)
    if config is None:
        config = RunConfig(search=settings or OptimizeSettings(), eval=options or EvalOptions())
    _override(config.search, overrides)
    # "none" (as in --llm none): the programmatic experts alone
    config.search.llm = [spec for spec in (config.search.llm if llm is None else llm)
                         if spec.strip().lower() != "none"]
    config.search.with_default_budget()
    config.validate()
    seed_paths = [Path(p) for p in [*config.seeds, *seeds]]
    for path in seed_paths:
        read_source(path, UsageError, "seed")  # a missing seed file stops here, before anything runs
    config.seeds = [str(p) for p in seed_paths]
    if llm_client is None and config.search.llm:
        llm_client, budget, config.llm = make_llm(config.search.llm, config.llm)
    from kfoundry.problem import read_problem

    read_problem(problem_path, config.eval.set_values)  # a bad problem stops here, before a run dir exists
    store = RunStore.create(out or _default_out(problem_path), problem_path, config.to_dict(),
                            seed=config.search.seed)
    return Session(problem_path, store, config, seed_paths, llm_client, budget)
