"""The reference side: the judge process (every input set's expected outputs and their float64 truth, the
comparisons of a candidate's outputs with them) and the baseline process (eager and torch.compile timed,
their on-disk cache). Neither ever imports a candidate.

Run by the judge and the baseline process; the parent reads the baselines' cache and sizes a problem with
its helpers, and a candidate's worker uses the reference helpers (`reference_job`). It may import
kfoundry.evaluate.timing and .shared; never kfoundry.evaluate.worker or .parent.
"""
