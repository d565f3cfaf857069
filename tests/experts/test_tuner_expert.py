"""kfoundry.experts.tuner_expert: the tuner as an expert proposes a variant the search has not seen, with
its changes in the proposal's record; on some turns (or remembered ones first) a dot precision switch."""

import asyncio
from pathlib import Path

from kfoundry.experts import tuner_expert
from kfoundry.experts.base import Step
from kfoundry.experts.tuner_expert import TunerExpert, restore_in, state_of
from kfoundry.search.individual import Individual
from tests.optimize.helpers import AFFINE_KERNEL

GEMM = (Path(__file__).resolve().parents[2] / "examples" / "linear_epilogue" / "kernel.py").read_text()


def test_the_tuner_proposes_a_new_variant_with_its_changes():
    parent = Individual(id="1", source=AFFINE_KERNEL.read_text(), status="ok", fitness=1.0)
    tuner = TunerExpert(is_known=lambda source: False)
    proposal = asyncio.run(tuner.propose(Step(parent, [], "why")))
    assert proposal.source and proposal.source != parent.source and proposal.parent_ids == ["1"]
    assert proposal.record["changes"] and proposal.why == "why"
    assert asyncio.run(tuner.propose(Step(None))).source is None  # nothing to tune
    everything = TunerExpert(is_known=lambda source: True)  # every variant seen already
    assert asyncio.run(everything.propose(Step(parent))).source is None


def test_the_tuner_switches_a_dot_precision_on_some_turns_and_remembered_ones_first(monkeypatch):
    parent = Individual(id="1", source=GEMM, status="ok", fitness=1.0)
    monkeypatch.setattr(tuner_expert, "PRECISION_SHARE", 1.0)
    proposal = asyncio.run(TunerExpert(is_known=lambda s: False).propose(Step(parent)))
    assert 'input_precision="tf32x3"' in proposal.source
    assert proposal.record["changes"] == {"dot_precision": {"from": 0, "to": 1}}
    monkeypatch.setattr(tuner_expert, "PRECISION_SHARE", 0.0)
    tuner = TunerExpert(is_known=lambda s: False)
    assert 'input_precision="ieee"' in asyncio.run(tuner.propose(Step(parent))).source  # block sizes instead
    tuner.preferred = {"dot_precision": 1}  # a switch to TF32x3 helped on a similar problem
    assert 'input_precision="tf32x3"' in asyncio.run(tuner.propose(Step(parent))).source


def test_a_correct_parent_is_switched_only_to_a_cheaper_dot_precision(monkeypatch):
    monkeypatch.setattr(tuner_expert, "PRECISION_SHARE", 1.0)
    tf32x3 = GEMM.replace('input_precision="ieee"', 'input_precision="tf32x3"')
    assert 'input_precision="tf32x3"' in tf32x3
    correct = Individual(id="1", source=tf32x3, status="ok", fitness=1.0)
    records = [asyncio.run(TunerExpert(is_known=lambda s: False, seed=seed).propose(Step(correct))).record
               for seed in range(4)]
    assert all("dot_precision" not in r["changes"] for r in records)  # IEEE would be slower: block sizes instead
    wrong = Individual(id="2", source=tf32x3, status="wrong_output")
    proposal = asyncio.run(TunerExpert(is_known=lambda s: False).propose(Step(wrong)))
    assert proposal.record["changes"] == {"dot_precision": {"from": 1, "to": 0}}  # a repair: more accurate


def test_its_random_state_comes_back():
    parent = Individual(id="1", source=AFFINE_KERNEL.read_text(), status="ok", fitness=1.0)
    first = TunerExpert(is_known=lambda s: False, seed=4)
    asyncio.run(first.propose(Step(parent)))
    saved = state_of([object(), first])
    again = TunerExpert(is_known=lambda s: False, seed=99)
    restore_in([again], saved)
    assert asyncio.run(again.propose(Step(parent))).source == asyncio.run(first.propose(Step(parent))).source
    assert state_of([object()]) is None


def test_a_diagnosed_parent_gets_a_step_its_way_and_the_record_says_so(monkeypatch):
    from tests.experts.test_tuner import _diagnosed

    monkeypatch.setattr(tuner_expert, "PRECISION_SHARE", 0.0)
    diagnosis = _diagnosed(GEMM, "_linear_silu_scale_kernel", 0.3, spills=64, regs=255)
    parent = Individual(id="1", source=GEMM, status="ok", fitness=1.2, diagnosis=diagnosis)
    records = [asyncio.run(TunerExpert(is_known=lambda s: False, seed=seed).propose(Step(parent))).record
               for seed in range(6)]
    guided = [r for r in records if r["origin"] == "guided"]
    assert guided and all(r["guided_by"] == "register-spills" for r in guided)
    assert all("guided_by" not in r for r in records if r["origin"] != "guided")


def _judged(tuner: TunerExpert, parent: Individual, changes: dict, speed: float, status: str = "ok") -> None:
    child = Individual(id=f"c{speed}", source="x", status=status, fitness=speed if status == "ok" else None,
                       record={"changes": changes})
    tuner.observe(child, parent)


def test_a_step_that_slowed_its_child_is_not_taken_again(monkeypatch):
    """16 warps on a GEMM tile ran every child at 0.26-0.46x of its parent on the H100, and the tuner drew it up
    to six times in 32 evaluations: once a step alone has run a child under 0.8x, no proposal takes it again."""
    monkeypatch.setattr(tuner_expert, "PRECISION_SHARE", 0.0)
    parent = Individual(id="1", source=GEMM, status="ok", fitness=2.0)

    def steps(tuner: TunerExpert, draws: int = 12) -> set:
        seen, taken = set(), set()
        tuner.is_known = lambda source: source in seen
        for _ in range(draws):
            proposal = asyncio.run(tuner.propose(Step(parent)))
            if proposal.source is None:
                break
            seen.add(proposal.source)
            taken |= {(n, c["from"], c["to"]) for n, c in proposal.record["changes"].items()}
        return taken

    before = steps(TunerExpert(is_known=lambda s: False, seed=3))
    slow = sorted(before)[0]
    tuner = TunerExpert(is_known=lambda s: False, seed=3)
    _judged(tuner, parent, {slow[0]: {"from": slow[1], "to": slow[2]}}, 0.7)  # 0.35x alone
    assert tuner.run.harmful() == {slow}
    after = steps(tuner)
    assert after and slow not in after  # the same seed took it before; other steps still come
    # a judged child with no parent speed, or of a failing parent, teaches nothing
    _judged(tuner, Individual(id="2", source=GEMM, status="wrong_output"), {"BK": {"from": 1, "to": 2}}, 0.1)
    assert tuner.run.harmful() == {slow}


def test_a_step_is_blamed_for_a_pair_only_when_it_is_not_fine_alone():
    parent = Individual(id="1", source=GEMM, status="ok", fitness=1.0)
    tuner = TunerExpert(is_known=lambda s: False)
    warps, stages, block = ("num_warps", 8, 16), ("num_stages", 4, 3), ("BK", 64, 32)
    pair = {name: {"from": old, "to": new} for name, old, new in (warps, stages)}
    _judged(tuner, parent, pair, 0.4)
    assert tuner.run.harmful() == set()  # one slow pair: neither is blamed yet
    _judged(tuner, parent, {"num_stages": {"from": 4, "to": 3}}, 0.98)  # stages alone: fine
    _judged(tuner, parent, {n: {"from": o, "to": w} for n, o, w in (warps, block)}, 0.0, status="compile_error")
    # warps: in two slow children (a failure counts 0.5x); BK in one; stages cleared by its child alone
    assert tuner.run.harmful() == {warps}
    _judged(tuner, parent, pair, 0.5)
    assert tuner.run.harmful() == {warps}
    # the steps come back with the random state after a resume; a run saved before them restores its rng alone
    again = TunerExpert(is_known=lambda s: False, seed=7)
    restore_in([again], state_of([tuner]))
    assert again.run.harmful() == tuner.run.harmful() and again.rng.getstate() == tuner.rng.getstate()
    old = TunerExpert(is_known=lambda s: False, seed=7)
    restore_in([old], state_of([tuner])["rng"])
    assert old.rng.getstate() == tuner.rng.getstate() and old.run.harmful() == set()
