"""The settings object: every variable it reads is documented on the Configuration page."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from onceonly.foundation.errors import ConfigError
from onceonly.foundation.kafka import Connection, producer_config
from onceonly.foundation.settings import Settings

#: the documentation site's table of every variable (docs/configuration.md)
CONFIGURATION = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"


def _variable(name: str) -> str:
    """The variable a field is read from: its alias's first choice, else ONCEONLY_<NAME>."""
    alias = Settings.model_fields[name].validation_alias
    choices = getattr(alias, "choices", None)
    if choices:
        return str(choices[0])
    return f"ONCEONLY_{name.upper()}"


@pytest.mark.parametrize("name", sorted(Settings.model_fields))
def test_every_setting_is_documented_on_the_configuration_page(name: str) -> None:
    assert f"`{_variable(name)}`" in CONFIGURATION.read_text(encoding="utf-8")


def test_the_linger_variable_reaches_the_producer_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONCEONLY_PRODUCE_LINGER_MS", "12")

    config = producer_config(Connection.from_settings(Settings.from_env()))

    assert config["linger.ms"] == 12


def test_a_worker_is_a_static_member_named_after_its_host_and_state() -> None:
    from pathlib import Path

    from onceonly.processors.runtime.app import worker_id

    here = Settings(data_dir=Path("/var/lib/onceonly/a"))

    assert worker_id(here, host="h1") == worker_id(here, host="h1")
    assert worker_id(here, host="h1") != worker_id(here, host="h2")
    assert worker_id(here, host="h1") != worker_id(
        Settings(data_dir=Path("/var/lib/onceonly/b")), host="h1"
    )
    assert worker_id(here, host="h1") != worker_id(
        Settings(data_dir=Path("/var/lib/onceonly/a"), worker_port=6067), host="h1"
    )
    assert worker_id(Settings(worker_id="w-7"), host="h1") == "w-7"


def test_per_provider_retentions_parse_from_provider_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONCEONLY_DEDUPE_RETENTION_BY_PROVIDER", "agentmail=P2D, standard.crm=PT36H")

    by_provider = Settings.from_env().dedupe_retention_by_provider

    assert by_provider == {"agentmail": timedelta(days=2), "standard.crm": timedelta(hours=36)}


@pytest.mark.parametrize(
    ("value", "says"),
    [("agentmial=P2D", "no provider"), ("stripe=", "pairs"), ("stripe=P0D", "longer than zero")],
)
def test_a_bad_per_provider_retention_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str, says: str
) -> None:
    monkeypatch.setenv("ONCEONLY_DEDUPE_RETENTION_BY_PROVIDER", value)

    with pytest.raises(ConfigError, match=f"ONCEONLY_DEDUPE_RETENTION_BY_PROVIDER.*{says}"):
        Settings.from_env()


def test_the_standby_variable_reaches_faust(monkeypatch: pytest.MonkeyPatch) -> None:
    from onceonly.processors.runtime.app import faust_app

    monkeypatch.delenv("ONCEONLY_STANDBY_REPLICAS", raising=False)
    assert faust_app(Settings.from_env()).conf.table_standby_replicas == 1

    monkeypatch.setenv("ONCEONLY_STANDBY_REPLICAS", "0")
    assert faust_app(Settings.from_env()).conf.table_standby_replicas == 0


def test_the_stream_buffer_variable_reaches_faust(monkeypatch: pytest.MonkeyPatch) -> None:
    from onceonly.processors.runtime.app import faust_app

    monkeypatch.setenv("ONCEONLY_STREAM_BUFFER_MAXSIZE", "65536")

    assert faust_app(Settings.from_env()).conf.stream_buffer_maxsize == 65536


def test_a_dedupe_retention_in_plain_seconds_is_read_as_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from datetime import timedelta

    monkeypatch.setenv("ONCEONLY_DEDUPE_RETENTION", "172800")

    assert Settings.from_env().dedupe_retention == timedelta(days=2)
