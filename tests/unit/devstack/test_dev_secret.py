"""The development secret of a first `make run`: made once, private, and only without one set."""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr

from devstack.dev_secret import (
    ensure_dev_secret,
    has_any_secret,
    read_dev_secret,
    with_dev_secret,
)
from onceonly.foundation.settings import Settings


def test_a_new_secret_is_a_svix_secret_kept_under_the_run_directory(tmp_path: Path) -> None:
    secret = ensure_dev_secret(tmp_path)

    assert secret.startswith("whsec_")
    assert read_dev_secret(tmp_path) == secret


def test_the_secret_file_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    ensure_dev_secret(tmp_path)

    assert (tmp_path / "agentmail-dev-secret").stat().st_mode & 0o777 == 0o600


def test_a_second_run_keeps_the_first_secret(tmp_path: Path) -> None:
    assert ensure_dev_secret(tmp_path) == ensure_dev_secret(tmp_path)


def test_no_secret_is_read_where_none_was_made(tmp_path: Path) -> None:
    assert read_dev_secret(tmp_path) is None


def test_a_configured_standard_webhook_secret_counts_as_a_secret() -> None:
    settings = Settings(standard_webhook_secrets={"crm": SecretStr("whsec_x")})

    assert has_any_secret(settings)


def test_settings_without_secrets_have_none() -> None:
    assert not has_any_secret(Settings())


def test_the_dev_secret_becomes_agentmails_webhook_secret() -> None:
    settings = with_dev_secret(Settings(), "whsec_dev")

    assert settings.agentmail_webhook_secret is not None
    assert settings.agentmail_webhook_secret.get_secret_value() == "whsec_dev"
