"""Errors of the run store."""

from kfoundry.errors import KFoundryError


class RunStoreError(KFoundryError):
    """A run directory that cannot be resumed: no store, a corrupt store, or another schema."""
