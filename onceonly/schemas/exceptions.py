"""Errors of the record schemas, and the root of onceonly's exception hierarchy.

The root lives here, in the bottom layer, so every layer above derives from it without
importing upwards; ``onceonly.foundation.errors`` re-exports it.
"""


class OnceOnlyError(Exception):
    """Base class of every error onceonly raises on purpose."""


class SchemaError(OnceOnlyError):
    """A record cannot be decoded: wrong version, missing field or not JSON."""
