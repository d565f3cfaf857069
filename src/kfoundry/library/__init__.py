"""The experience library: kernels, insights and recorded steps that persist across runs, and retrieval
of the ones that fit a problem (signature similarity plus BM25)."""

from kfoundry.library.store import Library, LibraryError, default_path

__all__ = ["Library", "LibraryError", "default_path"]
