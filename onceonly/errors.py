"""The root of onceonly's exception hierarchy.

Each subsystem keeps its own exceptions module (``ingest.exceptions``,
``onceonly.kafka.exceptions``, ``onceonly.broker``...) whose classes derive from
:class:`OnceOnlyError`, so a caller can catch everything of ours in one place.
Messages say what failed and what to do about it.
"""


class OnceOnlyError(Exception):
    """Base class of every error onceonly raises on purpose."""


class ConfigError(OnceOnlyError):
    """A setting is missing or malformed; the message names the variable."""
