"""The template composer: a programmatic expert (no LLM) that reads a problem's computation and writes
complete Triton `ModelNew` candidates from parametrized kernel templates."""

from kfoundry.experts.composer.compose import ComposedCandidate, ComposeResult, compose

__all__ = ["ComposeResult", "ComposedCandidate", "compose"]
