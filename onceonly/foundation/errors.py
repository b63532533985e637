"""The root of onceonly's exception hierarchy, and configuration errors.

Each subsystem keeps its own exceptions module (``onceonly.ingest.exceptions``,
``onceonly.foundation.kafka.exceptions``, ``devstack.broker``...) whose classes derive from
:class:`OnceOnlyError`, so a caller can catch everything of ours in one place. The root
is defined in ``onceonly.schemas.exceptions``, the bottom layer, so that no layer imports upwards.
Messages say what failed and what to do about it.
"""

from onceonly.schemas.exceptions import OnceOnlyError as OnceOnlyError


class ConfigError(OnceOnlyError):
    """A setting is missing or malformed; the message names the variable."""
