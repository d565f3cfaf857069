"""kfoundry.evaluate.parent.target_rows: the target compile's rows kept by the parent, signed, under the candidate's
own source. Real evaluations (static_target 9.0 on the CPU): a candidate evaluated again gets the rows its first
evaluation compiled and its worker compiles nothing; a record nobody of ours signed, or one filed under another
source, is never used."""

import json

from kfoundry.evaluate import EvalOptions, Evaluator
from kfoundry.evaluate.parent import target_rows
from kfoundry.evaluate.shared.signed_cache import read_signed

COMPILED = "worker_target_compile_s"  # the worker's time in the target compile: there only where it compiled


def test_a_candidate_evaluated_again_takes_its_rows_from_the_cache(problems_dir, candidates_dir, tmp_path):
    cache = tmp_path / "cache"
    options = EvalOptions(device="cpu", trials=1, timeout_s=120, static_target="9.0", cache_dir=cache)
    forged = tmp_path / "forged.py"
    forged.write_text((candidates_dir / "affine_ok.py").read_text() + "\n# another candidate, the same kernel\n")
    with Evaluator(problems_dir / "affine.py", options) as evaluator:
        first = evaluator.evaluate(candidates_dir / "affine_ok.py")
        [record_path] = (cache / target_rows.FOLDER).glob("*.json")
        record = read_signed(cache, record_path)
        # what a candidate without the sandbox's file rules could do: file a record under another source, one
        # unsigned and one signed by us for affine_ok moved under the other's name
        fake = [dict(row, n_regs=255, n_spills=99) for row in record["rows"]]
        other = target_rows._digest(forged.read_bytes())
        unsigned = {"record": dict(record, source=other, rows=fake), "hmac": "0" * 64}
        (cache / target_rows.FOLDER / f"{other}-unsigned.json").write_text(json.dumps(unsigned))
        (cache / target_rows.FOLDER / f"{other}-moved.json").write_text(record_path.read_text())
        again = evaluator.evaluate(candidates_dir / "affine_ok.py")
        planted = evaluator.evaluate(forged)
    for evaluation in (first, again, planted):
        assert evaluation.status == "ok", evaluation.message
    [row] = first.profile["triton"]
    assert row["derived_for"] == "sm_90" and row["n_regs"] > 0 and COMPILED in first.durations_s
    assert record["rows"] == first.profile["triton"] and record["capability"] == "9.0"
    assert again.profile["triton"] == first.profile["triton"] and COMPILED not in again.durations_s
    assert planted.profile["triton"] == first.profile["triton"] and COMPILED in planted.durations_s  # compiled itself
