"""How every onceonly client authenticates: the one place that turns the security settings
(``ONCEONLY_KAFKA_SECURITY_PROTOCOL``, SASL mechanism, user, password, CA file) into
librdkafka's configuration, which :meth:`Connection.from_settings` carries to every client.
The worker's faust/aiokafka side is built from the same settings in
:func:`onceonly.processors.runtime.app.faust_credentials`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from confluent_kafka import KafkaError
from pydantic import SecretStr

from onceonly.foundation.kafka.exceptions import AuthenticationFailed

#: a client's security configuration (librdkafka property names); empty: PLAINTEXT
Security = dict[str, str]


class SecuritySettings(Protocol):
    """What :func:`client_security` reads (``onceonly.foundation.settings.Settings`` has it)."""

    @property
    def kafka_security_protocol(self) -> str: ...
    @property
    def kafka_sasl_mechanism(self) -> str: ...
    @property
    def kafka_sasl_username(self) -> str | None: ...
    @property
    def kafka_sasl_password(self) -> SecretStr | None: ...
    @property
    def kafka_ssl_ca_file(self) -> Path | None: ...


def client_security(settings: SecuritySettings) -> Security:
    """librdkafka's ``security.protocol``, ``sasl.*`` and ``ssl.ca.location`` for the settings.

    The settings have checked already that a SASL protocol comes with a user and a password.
    """
    protocol = settings.kafka_security_protocol
    config: Security = {"security.protocol": protocol}
    if protocol.startswith("SASL_"):
        password = settings.kafka_sasl_password
        config["sasl.mechanism"] = settings.kafka_sasl_mechanism
        config["sasl.username"] = settings.kafka_sasl_username or ""
        config["sasl.password"] = password.get_secret_value() if password else ""
    if protocol.endswith("SSL") and settings.kafka_ssl_ca_file is not None:
        config["ssl.ca.location"] = str(settings.kafka_ssl_ca_file)
    return config


class AuthWatch:
    """librdkafka's ``error_cb``: keeps the last authentication error, so a request that
    timed out because the brokers refused the credentials can say so."""

    def __init__(self) -> None:
        self.error: str | None = None

    def __call__(self, error: KafkaError) -> None:
        if error.code() == KafkaError._AUTHENTICATION:
            self.error = error.str()

    def raise_if_refused(self, client: Any, bootstrap: str) -> None:
        """Serve the client's pending callbacks; raise AuthenticationFailed if one was that."""
        client.poll(0)
        if self.error is not None:
            raise AuthenticationFailed(
                f"Kafka at {bootstrap} refused onceonly's credentials ({self.error}); check "
                "ONCEONLY_KAFKA_SASL_USERNAME, ONCEONLY_KAFKA_SASL_PASSWORD, "
                "ONCEONLY_KAFKA_SASL_MECHANISM and ONCEONLY_KAFKA_SECURITY_PROTOCOL"
            )
