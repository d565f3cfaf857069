"""The library's error, apart from the store so that the command line can name it without loading
the store (and numpy with it)."""

from kfoundry.errors import KFoundryError


class LibraryError(KFoundryError):
    """A library file or an export that cannot be used, or an id that is not there."""
