"""The settings object: every variable it reads is documented in the README."""

from __future__ import annotations

from pathlib import Path

import pytest

from foundation.kafka import producer_config_from
from foundation.settings import Settings

README = Path(__file__).resolve().parents[3] / "README.md"


def _variable(name: str) -> str:
    """The variable a field is read from: its alias's first choice, else ONCEONLY_<NAME>."""
    alias = Settings.model_fields[name].validation_alias
    choices = getattr(alias, "choices", None)
    if choices:
        return str(choices[0])
    return f"ONCEONLY_{name.upper()}"


@pytest.mark.parametrize("name", sorted(Settings.model_fields))
def test_every_setting_is_documented_in_the_readme(name: str) -> None:
    assert f"`{_variable(name)}`" in README.read_text(encoding="utf-8")


def test_the_linger_variable_reaches_the_producer_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONCEONLY_PRODUCE_LINGER_MS", "12")

    config = producer_config_from(Settings.from_env())

    assert config["linger.ms"] == 12


def test_a_worker_is_a_static_member_named_after_its_host_and_state() -> None:
    from pathlib import Path

    from processors.faust_app import worker_id

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
