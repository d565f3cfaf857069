"""The parent process's side of an evaluation: the Evaluator and its pool over devices, the worker processes
it starts (their environment, folders, memory budgets, the CPU fork servers), its handles on the judge and
the baseline process, the memory plan, the guard's hooks, the re-runs under ncu and compute-sanitizer,
environment faults and the options.

Run by the parent only; it never imports a candidate. It may import every other subpackage of
kfoundry.evaluate (their message types, the baselines' cache, the reference side's helpers to size a
problem); none of them imports it.
"""
