"""The run store (one SQLite file per run), resume, and a run's outputs."""

from kfoundry.runs.errors import RunStoreError
from kfoundry.source_identity import normalize_source, source_hash
from kfoundry.random_state import random_state_from_json, random_state_to_json
from kfoundry.runs.schema import SCHEMA_VERSION
from kfoundry.runs.store import RunStore

__all__ = [
           "SCHEMA_VERSION",
           "RunStore",
           "RunStoreError",
           "normalize_source",
           "random_state_from_json",
           "random_state_to_json",
           "source_hash",
]
