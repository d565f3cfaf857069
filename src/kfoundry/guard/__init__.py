"""Anti-cheating guard: static rules on a candidate's source (this import is light: no torch)."""

from .findings import RULES, Finding
from .static import check_source

__all__ = ["RULES", "Finding", "check_source"]
