"""One Connection per set of settings: every client it configures carries the security."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from pydantic import SecretStr

from onceonly.foundation.kafka import Connection, producer_config
from onceonly.foundation.settings import Settings

SCRAM = {
    "kafka_sasl_mechanism": "SCRAM-SHA-512",
    "kafka_sasl_username": "onceonly",
    "kafka_sasl_password": SecretStr("s3cret"),
}
SASL = {
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "onceonly",
    "sasl.password": "s3cret",
}


@pytest.mark.parametrize(
    ("protocol", "credentials", "expected"),
    [
        ("PLAINTEXT", {}, {}),
        ("SSL", {}, {"ssl.ca.location": "CA"}),
        ("SASL_PLAINTEXT", SCRAM, SASL),
        ("SASL_SSL", SCRAM, {**SASL, "ssl.ca.location": "CA"}),
    ],
)
def test_from_settings_maps_each_protocol(
    protocol: str, credentials: dict[str, object], expected: dict[str, str], tmp_path: Path
) -> None:
    ca = tmp_path / "ca.pem"
    settings = Settings(
        kafka_bootstrap="k1:9092,k2:9092",
        kafka_security_protocol=protocol,  # type: ignore[arg-type]
        kafka_ssl_ca_file=ca,
        **credentials,  # type: ignore[arg-type]
    )

    connection = Connection.from_settings(settings)

    wanted = {k: str(ca) if v == "CA" else v for k, v in expected.items()}
    assert connection.bootstrap == "k1:9092,k2:9092"
    assert dict(connection.security) == {"security.protocol": protocol, **wanted}


def test_every_config_it_gives_carries_the_bootstrap_and_the_security() -> None:
    connection = Connection.from_settings(
        Settings(kafka_security_protocol="SASL_PLAINTEXT", **SCRAM)  # type: ignore[arg-type]
    )

    for config in (connection.config(), connection.config(**{"group.id": "g"})):
        assert config["bootstrap.servers"] == connection.bootstrap
        assert config["security.protocol"] == "SASL_PLAINTEXT"
        assert {k: config[k] for k in SASL} == SASL
    assert producer_config(connection)["sasl.password"] == "s3cret"


def test_the_producer_limits_come_from_the_settings() -> None:
    settings = Settings(produce_timeout_ms=1234, produce_linger_ms=7, max_body_bytes=4096)

    config = producer_config(Connection.from_settings(settings))

    assert config["message.timeout.ms"] == 1234
    assert config["linger.ms"] == 7
    assert config["message.max.bytes"] == settings.record_max_bytes


def test_extra_settings_come_last() -> None:
    connection = Connection("k:9092", {"security.protocol": "SSL"})

    assert connection.config(**{"security.protocol": "PLAINTEXT"})["security.protocol"] == (
        "PLAINTEXT"
    )
    assert producer_config(connection, **{"linger.ms": 50})["linger.ms"] == 50


def test_it_cannot_be_changed_and_never_shows_the_password() -> None:
    connection = Connection.from_settings(
        Settings(kafka_security_protocol="SASL_SSL", **SCRAM)  # type: ignore[arg-type]
    )

    with pytest.raises(dataclasses.FrozenInstanceError):
        connection.bootstrap = "elsewhere:9092"  # type: ignore[misc]
    with pytest.raises(TypeError):
        connection.security["sasl.password"] = "other"  # type: ignore[index]
    assert "s3cret" not in repr(connection) and "SASL_SSL" in repr(connection)
    assert hash(connection) == hash(dataclasses.replace(connection))


def test_timeouts_default_to_what_the_seam_used_and_can_be_replaced() -> None:
    connection = Connection("k:9092")

    assert (connection.request_timeout_s, connection.read_timeout_s) == (10.0, 5.0)
    assert dataclasses.replace(connection, request_timeout_s=60).request_timeout_s == 60
