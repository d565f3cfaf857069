"""GPU timing, the same for candidates and baselines, and the GPU lock that our processes share one GPU by
(compiling gives it up).

Run by every process that uses the GPU (a candidate's worker, the judge, the baseline process); the parent
reads its settings (the lock's file, the timing method). It imports nothing else of kfoundry.evaluate.
"""
