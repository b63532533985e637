"""Which routes exist follows from which secrets are set; bad secrets fail at start-up."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from onceonly.foundation.errors import ConfigError
from onceonly.foundation.settings import Settings
from onceonly.ingest.app import providers_from_settings
from testkit import signing


def test_only_providers_with_a_secret_get_a_route() -> None:
    settings = Settings(
        nylas_webhook_secret=SecretStr(signing.NYLAS_SECRET),
        standard_webhook_secrets={"crm": SecretStr(signing.STANDARD_SECRET)},
    )

    assert sorted(providers_from_settings(settings)) == ["nylas", "standard/crm"]


def test_an_empty_agentmail_secret_fails_at_start_up() -> None:
    settings = Settings(agentmail_webhook_secret=SecretStr("whsec_"))

    with pytest.raises(ConfigError, match=r"agentmail|svix"):
        providers_from_settings(settings)


def test_standard_webhook_secrets_parse_from_source_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONCEONLY_STANDARD_WEBHOOK_SECRETS", "crm=whsec_a, billing=whsec_b")

    settings = Settings.from_env()

    assert sorted(settings.standard_webhook_secrets) == ["billing", "crm"]


def test_a_pair_without_a_secret_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONCEONLY_STANDARD_WEBHOOK_SECRETS", "crm=")

    with pytest.raises(ConfigError, match="ONCEONLY_STANDARD_WEBHOOK_SECRETS"):
        Settings.from_env()


def test_secrets_do_not_appear_in_the_settings_repr() -> None:
    settings = Settings(nylas_webhook_secret=SecretStr("hunter2-secret"))

    assert "hunter2-secret" not in repr(settings)


def test_a_malformed_secrets_variable_never_quotes_the_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ONCEONLY_STANDARD_WEBHOOK_SECRETS", "crm=whsec_TOPSECRETVALUE,x")

    with pytest.raises(ConfigError) as error:
        Settings.from_env()

    assert "TOPSECRETVALUE" not in str(error.value)
    assert "whsec_" not in str(error.value)
