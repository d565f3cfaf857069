"""The tuner expert: no LLM. It mutates the tunable constants of a parent (Triton block sizes, num_warps,
num_stages, group and split sizes; CUDA block sizes and constants, see `tunables`) within valid ranges and the
device's limits, mostly in the direction the parent's diagnosis points (registers spilled: smaller tiles, fewer
stages, more warps; memory-bound: wider blocks and more warps; see DIRECTIONS), and remembers through the
experience library which settings helped on problems of the same class.

Limits: each launch or config of a tl.dot kernel is checked as the composer's templates are
(kfoundry.experts.composer.templates.device_limits: shared memory of the pipelined operand tiles and of the
epilogue, registers of the accumulators and operand fragments, threads per block) against the device's limits
(the run's GPU, or a --target-gpu; none: the default target, an H100); a tile dim no literal spells (BN sized on the
host) is taken as UNKNOWN_TILE. For CUDA strings: the device's threads per block and 48 KiB of static __shared__
arrays. A variant must satisfy each limit, or at least be no worse than its parent where the parent already exceeds
it (the estimate errs high: a parent that works proves it) -- except shared memory and threads when the parent
itself failed "out of resource": then every variant must fit.
"""

from __future__ import annotations

import ast
import math
import random
from collections.abc import Container, Iterator
from dataclasses import dataclass
from typing import Any

from kfoundry import source_ast
from kfoundry.experts.composer.templates.device_limits import DEFAULT_LIMITS, DeviceLimits, dot_need, limits_of
from kfoundry.experts.tunables import (Discovery, Tunable, apply_values, discover, find_tunables, line_starts,
                                       node_span)
from kfoundry.types import DeviceFacts, Diagnosis

__all__ = ["DIRECTIONS", "DOT_PRECISIONS", "Guidance", "Tunable", "TunedVariant", "find_tunables", "guidance",
           "limits", "precision_variants", "preferred_settings", "shared_memory_limit", "tune", "tuning_record"]

STATIC_SHARED_BYTES = 48 * 1024  # CUDA's cap on static __shared__ arrays, whatever the device
HOPPER_SHARED_BYTES = 227 * 1024
DEFAULT_SHARED_BYTES = DEFAULT_LIMITS.shared_memory_per_block  # when the device is not known
UNKNOWN_TILE = 128  # a dot tile dim no literal spells (BN = max(16, next_power_of_2(N)) on the host)
HARD_LIMITS = ("shared memory", "threads")  # what fails to compile or launch; registers over the limit spill
NEIGHBOUR_PROBABILITY = 0.8  # the rest: any valid value
ATTEMPTS_PER_VARIANT = 25
GUIDED_SHARE = 0.75  # of the proposals on a parent whose diagnosis points a way: a step that way, the rest random

# The way each kind of tunable moves for the rule a diagnosis chose (kfoundry.diagnose.performance.RULES): +1 a
# step up (x2 for powers of two), -1 a step down. Rules with no entry (near the roofline, fuse kernels) give none.
DIRECTIONS: dict[str, dict[str, int]] = {
    "register-spills": {"block": -1, "stages": -1, "warps": 1},
    "low-occupancy-registers": {"block": -1, "stages": -1, "warps": 1},
    "memory-below-bandwidth": {"block": 1, "warps": 1, "cuda_threads": 1},  # wider vectors, more bytes in flight
    "launch-bound": {"block": 1},  # fewer, bigger programs
    "latency-bound": {"block": -1, "split": 1},  # more programs in flight
    "fp32-matmul-below-peak": {"block": 1, "stages": 1},  # more reuse per tile, deeper pipelining
    "compute-below-peak": {"block": 1, "stages": 1},
}
REGISTER_RULES = ("register-spills", "low-occupancy-registers")


@dataclass(frozen=True)
class Guidance:
    """Where a parent's diagnosis points the tuner: its rule, the moves (kind -> +1 / -1), and the kernels it
    names (for the register rules: the kernels that spill or are register-limited; empty: every kernel)."""

    rule: str
    moves: dict[str, int]
    kernels: frozenset[str] = frozenset()


def guidance(diagnosis: Diagnosis | None) -> Guidance | None:
    """The tuner's direction from a diagnosis (its `bound` finding's rule), or None where it points no way
    (no timing: the CPU; a failing parent; a rule with no tunable answer)."""
    if diagnosis is None:
        return None
    bound = next((f for f in diagnosis.findings if f.category == "bound"), None)
    rule = bound.data.get("rule") if bound is not None else None
    if rule not in DIRECTIONS:
        return None
    kernels: frozenset[str] = frozenset()
    if rule in REGISTER_RULES:
        kernels = frozenset(str(f.data.get("name")) for f in diagnosis.findings
                            if f.category == "triton-metadata" and f.severity != "info" and f.data.get("name"))
    return Guidance(rule, DIRECTIONS[rule], kernels)


def _step(tunable: Tunable, direction: int) -> int | None:
    """The neighbouring choice of `tunable` in `direction`, or None at the end of its range."""
    index = tunable.choices.index(tunable.value) + direction
    return tunable.choices[index] if 0 <= index < len(tunable.choices) else None


def _guided_change(tunables: list[Tunable], rng: random.Random, guide: Guidance, max_changes: int
                   ) -> dict[str, int] | None:
    """1..max_changes tunables the guidance moves, a step each: where it names kernels, theirs (a launch's
    settings) and the host's (a BLOCK = 128 in forward may feed any launch there), not other launches'."""
    launches = {t.site for t in tunables if "launch of" in t.where}
    movable = [(t, value) for t in tunables
               if t.kind in guide.moves and (not guide.kernels or t.site in guide.kernels or t.site not in launches)
               and (value := _step(t, guide.moves[t.kind])) is not None]
    if not movable:
        return None
    picked = rng.sample(movable, rng.randint(1, min(max_changes, len(movable))))
    return {t.name: value for t, value in picked}


@dataclass
class TunedVariant:
    source: str
    changes: dict[str, tuple[int, int]]  # name -> (old, new)
    summary: str  # e.g. "BLOCK_M 64->128, num_warps 4->8"
    origin: str = "random"  # remembered (the library's preference), guided (the diagnosis's way), random, precision


def shared_memory_limit(device: DeviceFacts | DeviceLimits | None) -> int:
    """Bytes of shared memory one block may use on `device` (device_limits.limits_of)."""
    return limits_of(device).shared_memory_per_block


def limits(found: Discovery, device: DeviceFacts | DeviceLimits | None = None) -> dict[str, tuple[int, int]]:
    """What each launch, config or CUDA string needs against `device`'s limit: key -> (estimate, limit)."""
    device = limits_of(device)
    checks: dict[str, tuple[int, int]] = {}
    for group in found.tile_groups:
        if not (group.m or group.n or group.k):
            continue
        need = dot_need(group.m or UNKNOWN_TILE, group.n or UNKNOWN_TILE, group.k or UNKNOWN_TILE,
                        num_warps=max(group.warps, 1), num_stages=group.stages, element_bytes=group.element_bytes,
                        a_copies=group.a_copies, b_copies=group.b_copies, accumulators=group.accumulators)
        checks[f"{group.label}: shared memory"] = (need.shared_bytes, device.shared_memory_per_block)
        checks[f"{group.label}: registers"] = (need.registers, device.register_limit(need.threads))
        checks[f"{group.label}: threads"] = (need.threads, device.max_threads_per_block)
    for facts in found.cuda:
        if facts.max_threads is not None:
            checks[f"{facts.label}: threads"] = (facts.max_threads, device.max_threads_per_block)
        checks[f"{facts.label}: static shared memory"] = (facts.static_shared_bytes, STATIC_SHARED_BYTES)
    return checks


def _within(parent: dict[str, tuple[int, int]], child: dict[str, tuple[int, int]], strict: bool = False) -> bool:
    """Each of the child's needs within its limit, or no worse than the parent's where the parent exceeds it
    too (`strict`: the parent failed out of resource, so its shared memory and threads prove nothing)."""
    for key, (need, limit) in child.items():
        hard = strict and key.endswith(HARD_LIMITS)
        if need > limit and (hard or need > parent.get(key, (0, 0))[0]):
            return False
    return True


def _neighbour_or_any(tunable: Tunable, rng: random.Random) -> int:
    choices, index = tunable.choices, tunable.choices.index(tunable.value)
    if rng.random() < NEIGHBOUR_PROBABILITY:
        steps = [i for i in (index - 1, index + 1) if 0 <= i < len(choices)]
        return choices[rng.choice(steps)]
    return rng.choice([c for c in choices if c != tunable.value])


def _random_change(tunables: list[Tunable], rng: random.Random, max_changes: int) -> dict[str, int]:
    count = rng.randint(1, min(max_changes, len(tunables)))
    return {t.name: _neighbour_or_any(t, rng) for t in rng.sample(tunables, count)}


def _preferred_changes(tunables: list[Tunable], preferred: dict[str, int] | None) -> dict[str, int]:
    """Valid remembered values that differ from the parent's; a qualified name (BLOCK@forward) falls back to BLOCK."""
    preferred = preferred if isinstance(preferred, dict) else {}
    changes = {}
    for tunable in tunables:
        value = preferred.get(tunable.name, preferred.get(tunable.base))
        if isinstance(value, int) and value != tunable.value and value in tunable.choices:
            changes[tunable.name] = value
    return changes


def _proposals(tunables: list[Tunable], rng: random.Random, preferred: dict[str, int] | None, max_changes: int,
               attempts: int, guide: Guidance | None) -> Iterator[tuple[dict[str, int], str]]:
    """(changes, origin) in the order they are tried."""
    remembered = _preferred_changes(tunables, preferred)
    if remembered:
        yield dict(list(remembered.items())[:max_changes]), "remembered"
        if len(remembered) > 1:
            yield from (({name: value}, "remembered") for name, value in remembered.items())
    for _ in range(attempts):
        guided = _guided_change(tunables, rng, guide, max_changes) if guide and rng.random() < GUIDED_SHARE else None
        yield (guided, "guided") if guided else (_random_change(tunables, rng, max_changes), "random")


def tune(source: str, rng: random.Random, *, device: DeviceFacts | DeviceLimits | None = None, n: int = 1,
         preferred: dict[str, int] | None = None, max_changes: int = 2,
         guide: Guidance | None = None, strict: bool = False,
         avoid: Container[tuple[str, int, int]] = ()) -> list[TunedVariant]:
    """Up to `n` distinct valid variants of `source`, each changing 1..max_changes tunables (mostly to a
    neighbouring value, x2 or /2), each within `device`'s limits (see the module; `strict`: the parent failed
    out of resource, every variant must fit); remembered `preferred` values come first, then mostly steps the
    way `guide` (the parent's diagnosis) points; none takes a step (name, old, new) in `avoid`. [] when nothing
    is tunable."""
    found = discover(source)
    tunables = [t for t in found.tunables if len(t.choices) > 1] if found else []
    if not tunables or n < 1 or max_changes < 1:
        return []
    device = limits_of(device)
    parent_limits = limits(found, device)
    by_name = {t.name: t for t in tunables}
    seen: set[frozenset] = set()
    variants: list[TunedVariant] = []
    for proposal, origin in _proposals(tunables, rng, preferred, max_changes, ATTEMPTS_PER_VARIANT * n, guide):
        key = frozenset(proposal.items())
        if key in seen:
            continue
        seen.add(key)
        if any((name, by_name[name].value, value) in avoid for name, value in proposal.items()):
            continue
        variant = _variant(source, found.tunables, by_name, proposal, parent_limits, device, origin, strict)
        if variant is not None:
            variants.append(variant)
            if len(variants) == n:
                break
    return variants


def _variant(source: str, tunables: list[Tunable], by_name: dict[str, Tunable], values: dict[str, int],
             parent_limits: dict[str, tuple[int, int]], device: DeviceLimits, origin: str,
             strict: bool = False) -> TunedVariant | None:
    text = apply_values(source, tunables, values)
    child = discover(text) if text is not None and text != source else None
    if child is None or not _within(parent_limits, limits(child, device), strict):
        return None
    changes = {name: (by_name[name].value, value) for name, value in values.items()}
    ordered = {t.name: changes[t.name] for t in tunables if t.name in changes}
    summary = ", ".join(f"{name} {old}->{new}" for name, (old, new) in ordered.items())
    return TunedVariant(text, ordered, summary, origin)


# fp32 dot-product precisions, by index (the experience library records ints): IEEE on the FMA units,
# three TF32 products on the tensor cores (near-fp32 accuracy), plain TF32 (fair only where the reference
# itself runs TF32, so the tuner moves to it only from a candidate that already uses it)
DOT_PRECISIONS = ("ieee", "tf32x3", "tf32")
PRECISION_NAME = "dot_precision"


def _precision_literal(value: ast.expr) -> ast.Constant | None:
    if isinstance(value, ast.IfExp):  # "tf32x3" if x.dtype == torch.float32 else "tf32": the fp32 branch
        value = value.body
    return value if isinstance(value, ast.Constant) and value.value in DOT_PRECISIONS else None


def precision_sites(source: str) -> list[ast.Constant]:
    """The string literals that choose a tl.dot's fp32 precision: `input_precision="..."`, or a keyword or
    name spelling PRECISION (`DOT_PRECISION="tf32x3" if ... else "tf32"`, the fp32 branch)."""
    try:
        tree = source_ast.parse(source)
    except SyntaxError:
        return []
    sites = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg and (node.arg == "input_precision" or
                                                           "PRECISION" in node.arg.upper()):
            literal = _precision_literal(node.value)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and "PRECISION" in t.id.upper()
                                                  for t in node.targets):
            literal = _precision_literal(node.value)
        else:
            continue
        if literal is not None:
            sites.append(literal)
    return sites


def precision_variants(source: str) -> list[TunedVariant]:
    """The parent with its dot precision switched (every site at once), one variant per other precision:
    IEEE <-> TF32x3, and away from TF32 where the parent uses it. [] when no precision is spelled."""
    sites = precision_sites(source)
    if not sites:
        return []
    current = {site.value for site in sites}
    old = sites[0].value
    data = source.encode()
    starts = line_starts(data)
    spans = sorted(((span.start, span.end) for span in (node_span(starts, site) for site in sites)), reverse=True)
    variants = []
    for new in DOT_PRECISIONS:
        if new in current or (new == "tf32" and "tf32" not in current):
            continue
        text = data
        for start, end in spans:
            quote = text[start:start + 1]
            text = text[:start] + quote + new.encode() + quote + text[end:]
        changes = {PRECISION_NAME: (DOT_PRECISIONS.index(old), DOT_PRECISIONS.index(new))}
        variants.append(TunedVariant(text.decode(), changes, f"dot precision {old}->{new}", "precision"))
    return variants


def tuning_record(changes: dict[str, tuple[int, int]]) -> dict[str, dict[str, int]]:
    """A variant's changes as JSON for the experience library: {"BLOCK": {"from": 1024, "to": 2048}}."""
    return {name: {"from": int(old), "to": int(new)} for name, (old, new) in changes.items()}


def _targets(changes: Any) -> dict[str, int]:
    """name -> new value from a record's changes, in tuning_record form or as (old, new) pairs."""
    targets = {}
    for name, change in (changes.items() if isinstance(changes, dict) else []):
        new = change.get("to") if isinstance(change, dict) else (
            change[1] if isinstance(change, (list, tuple)) and len(change) == 2 else None)
        if isinstance(new, int) and not isinstance(new, bool):
            targets[str(name)] = new
    return targets


def preferred_settings(records: list[dict[str, Any]]) -> dict[str, int]:
    """From tuning steps {"changes", "speedup_before", "speedup_after"}: per name, the value that most often
    improved the speedup (ties: the larger total gain). Records without both speedups say nothing. A qualified
    name (num_warps@line35) also counts for its plain one (num_warps), which carries over to other problems."""
    wins: dict[str, dict[int, list[float]]] = {}  # name -> value -> [times it helped, total gain]
    for record in records or []:
        if not isinstance(record, dict):
            continue
        before, after = record.get("speedup_before"), record.get("speedup_after")
        if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in (before, after)) or after <= before:
            continue
        targets = _targets(record.get("changes"))
        plain = {(name.split("@")[0], value) for name, value in targets.items()
                 if "@" in name and name.split("@")[0] not in targets}
        for name, value in [*targets.items(), *sorted(plain)]:
            tally = wins.setdefault(name, {}).setdefault(value, [0, 0.0])
            tally[0] += 1
            tally[1] += after - before
    return {name: max(tallies, key=lambda v: (tallies[v][0], tallies[v][1])) for name, tallies in wins.items()}
