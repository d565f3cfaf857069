"""Search: islands, selection, migration, stopping rules and the asynchronous loop. Independent of
LLMs and evaluation, which come in through `propose` and an `EvaluationQueue`."""

from kfoundry.search.archipelago import TOPOLOGIES, Archipelago
from kfoundry.search.features import cell, features
from kfoundry.search.individual import Individual, normalize_source, source_hash
from kfoundry.search.island import Island
from kfoundry.search.loop import SearchLoop, SearchResult
from kfoundry.search.queue import EvaluationQueue, LocalQueue, Outcome
from kfoundry.search.selection import proportional, select, tournament
from kfoundry.search.stop import SearchState, StopRules

__all__ = [
           "TOPOLOGIES",
           "Archipelago",
           "EvaluationQueue",
           "Individual",
           "Island",
           "LocalQueue",
           "Outcome",
           "SearchLoop",
           "SearchResult",
           "SearchState",
           "StopRules",
           "cell",
           "features",
           "normalize_source",
           "proportional",
           "select",
           "source_hash",
           "tournament",
]
