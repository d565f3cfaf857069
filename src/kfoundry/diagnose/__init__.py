"""The diagnosis engine: every evaluation becomes structured findings the next step can act on.

`diagnose(evaluation, source)` gives a `Diagnosis` (kfoundry.types); `render_markdown` gives its
compact, bounded rendering for prompts and terminals, and `render_text` the same as plain text. The evidence is gathered by the evaluator
where the data live (the wrong output's error pattern in the parent, the kernel profile and the
Triton metadata in the worker, ncu and compute-sanitizer re-runs); this package only reads it.
"""

from kfoundry.diagnose.engine import diagnose
from kfoundry.diagnose.render import render_markdown, render_text

__all__ = ["diagnose", "render_markdown", "render_text"]
