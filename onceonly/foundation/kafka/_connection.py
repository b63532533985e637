"""How every confluent-kafka client of onceonly reaches the brokers: one typed object.

A :class:`Connection` holds the bootstrap, the security configuration and the timeouts;
every reader, admin client and producer of the seam takes one instead of a bootstrap
string, so no client can be built without the credentials. Build it from the settings
with :meth:`Connection.from_settings`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from onceonly.foundation.kafka._config import client_config
from onceonly.foundation.kafka._security import SecuritySettings, client_security


class ConnectionSettings(SecuritySettings, Protocol):
    """What :meth:`Connection.from_settings` reads (``onceonly.foundation.settings.Settings``
    has it)."""

    @property
    def kafka_bootstrap(self) -> str: ...
    @property
    def produce_timeout_ms(self) -> int: ...
    @property
    def produce_linger_ms(self) -> int: ...
    @property
    def record_max_bytes(self) -> int: ...


def _frozen(security: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(security))


@dataclass(frozen=True, slots=True)
class Connection:
    """The brokers, how to authenticate to them, and how long to wait for them."""

    #: ``host:port[,host:port...]``
    bootstrap: str
    #: librdkafka's ``security.protocol``, ``sasl.*``, ``ssl.*`` (empty: PLAINTEXT)
    security: Mapping[str, str] = field(default_factory=dict)
    #: a metadata, offsets or admin request waits this long for an answer
    request_timeout_s: float = 10.0
    #: a reader (or a lag query) waits this long for the next record or answer
    read_timeout_s: float = 5.0
    #: a produced record not acknowledged within this fails (``message.timeout.ms``)
    produce_timeout_ms: int = 5000
    #: a producer waits this long to fill a batch (``linger.ms``)
    produce_linger_ms: int = 5
    #: the largest record a producer sends (``message.max.bytes``)
    record_max_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        object.__setattr__(self, "security", _frozen(self.security))

    def __hash__(self) -> int:
        return hash((self.bootstrap, tuple(sorted(self.security.items()))))

    def __repr__(self) -> str:  # the password stays out of logs and tracebacks
        protocol = self.security.get("security.protocol", "PLAINTEXT")
        return f"Connection({self.bootstrap!r}, {protocol})"

    @classmethod
    def from_settings(cls, settings: ConnectionSettings) -> Connection:
        """The bootstrap, security (:func:`client_security`) and producer limits of the
        settings."""
        return cls(
            settings.kafka_bootstrap,
            client_security(settings),
            produce_timeout_ms=settings.produce_timeout_ms,
            produce_linger_ms=settings.produce_linger_ms,
            record_max_bytes=settings.record_max_bytes,
        )

    def config(self, **extra: Any) -> dict[str, Any]:
        """librdkafka's configuration for a client of these brokers: the bootstrap, our
        logger, the security settings, then ``extra``."""
        return client_config(self.bootstrap, **{**self.security, **extra})
