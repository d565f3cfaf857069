"""Moved to kfoundry.redact (evaluation processes scrub secrets too, and must not import the LLM stack);
these names stay importable from here."""

from kfoundry.redact import MASK, Redactor, scrub_url

__all__ = ["MASK", "Redactor", "scrub_url"]
