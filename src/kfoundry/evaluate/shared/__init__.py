"""What the evaluation's processes share: the names of the parent-worker protocol, how tensors cross between
a candidate's worker and the judge, the device's facts (measured, cached and signed, or a datasheet's).

Imported by every process of an evaluation (and by the prompts, for device facts). It imports nothing else
of kfoundry.evaluate.
"""
