"""Errors of the record schemas."""

from onceonly.errors import OnceOnlyError


class SchemaError(OnceOnlyError):
    """A record cannot be decoded: wrong version, missing field or not JSON."""
