"""Every client's security settings come from one place; SASL needs its credentials."""

from __future__ import annotations

from pathlib import Path

import faust
import pytest
from pydantic import SecretStr

from onceonly.foundation.errors import ConfigError
from onceonly.foundation.kafka import Connection, client_security, producer_config
from onceonly.foundation.settings import Settings
from onceonly.processors.runtime.app import faust_app, faust_credentials


def _scram(**overrides: object) -> Settings:
    values: dict[str, object] = {
        "kafka_security_protocol": "SASL_PLAINTEXT",
        "kafka_sasl_mechanism": "SCRAM-SHA-512",
        "kafka_sasl_username": "onceonly",
        "kafka_sasl_password": SecretStr("s3cret"),
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


def test_plaintext_by_default() -> None:
    assert client_security(Settings()) == {"security.protocol": "PLAINTEXT"}
    assert faust_credentials(Settings()) is None


def test_sasl_gives_librdkafka_the_mechanism_user_and_password() -> None:
    assert client_security(_scram()) == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "onceonly",
        "sasl.password": "s3cret",
    }


def test_the_producer_connects_as_every_other_client() -> None:
    config = producer_config(Connection.from_settings(_scram()))
    assert config["sasl.username"] == "onceonly"
    assert config["acks"] == "all"
    assert config["enable.idempotence"] is True


def test_the_ca_file_applies_to_ssl_protocols_only(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    assert client_security(_scram(kafka_security_protocol="SASL_SSL", kafka_ssl_ca_file=ca))[
        "ssl.ca.location"
    ] == str(ca)
    assert "ssl.ca.location" not in client_security(_scram(kafka_ssl_ca_file=ca))


def test_faust_gets_sasl_credentials_with_the_same_mechanism() -> None:
    credentials = faust_credentials(_scram())
    assert isinstance(credentials, faust.SASLCredentials)
    assert credentials.mechanism.value == "SCRAM-SHA-512"
    assert credentials.protocol.value == "SASL_PLAINTEXT"


def test_sasl_without_a_password_is_refused_naming_the_variables() -> None:
    with pytest.raises(ConfigError, match="ONCEONLY_KAFKA_SASL_PASSWORD"):
        Settings.from_env(kafka_security_protocol="SASL_SSL", kafka_sasl_username="u")


def test_the_password_is_never_shown() -> None:
    settings = _scram()
    assert "s3cret" not in repr(settings)
    assert "s3cret" not in str(settings.model_dump())


@pytest.mark.parametrize("view", ["router", "tables", "graph", "stats", "metrics"])
def test_faust_serves_none_of_its_own_views(view: str) -> None:
    """They can show table contents (email text); the worker's web server stays up for
    /metrics and the operator page."""
    conf = faust_app(Settings()).conf

    assert getattr(conf, f"web_{view}_enabled") is False
    assert conf.web_enabled is True
