"""kfoundry.evaluate.worker.fork_server: what the server imports before it forks, its children hold from the start.
A real evaluation: the candidate's constructor, which runs before any of its kernels is launched, fails unless
every module of AFTER_FORK is in its worker already (Triton's Gluon front end, the judge's flop counter: nothing
in a candidate's worker imports them before its first launch)."""

from kfoundry.evaluate.worker.fork_server import AFTER_FORK


def test_a_forked_candidate_holds_what_its_server_imported_before_anything_runs(affine_evaluator, candidates_dir,
                                                                                tmp_path):
    text = (candidates_dir / "affine_ok.py").read_text()
    check = ("        import sys\n"
             f"        missing = [name for name in {AFTER_FORK!r} if name not in sys.modules]\n"
             "        if missing:\n"
             "            raise RuntimeError(f'imported after the fork: {missing}')\n")
    text = text.replace("        self.shift = shift\n", "        self.shift = shift\n" + check, 1)
    candidate = tmp_path / "holds_the_servers_modules.py"
    candidate.write_text(text)
    evaluation = affine_evaluator.evaluate(candidate)
    assert evaluation.status == "ok", evaluation.message
