"""What runs inside a worker process: the entry every evaluation process the parent starts goes through
(kfoundry.sandbox.start, then `entry`, which runs the job it is sent), the candidate's job and its replay
under a tool, the description of a candidate's failures, and the fork server that CPU workers are forked
from.

Run by the worker processes (and the fork server). It may import kfoundry.evaluate.reference (the judge's
and the baseline process's jobs, which the entry runs, and their reference helpers), .timing and .shared;
never kfoundry.evaluate.parent.
"""
