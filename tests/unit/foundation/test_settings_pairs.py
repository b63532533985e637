"""``name=value`` list variables: a malformed entry is named by position, never quoted."""

from __future__ import annotations

import pytest

from onceonly.foundation.errors import ConfigError
from onceonly.foundation.settings import Settings

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def test_a_secret_entry_lacking_its_source_is_never_printed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ONCEONLY_STANDARD_WEBHOOK_SECRETS", f"billing=whsec_a,{SECRET}")

    with pytest.raises(ConfigError) as raised:
        Settings.from_env()

    message = str(raised.value)
    assert SECRET[:6] not in message and "MfKQ" not in message
    assert "entry 2 of 2" in message and "source=secret" in message


def test_each_missing_side_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    for value, words in [("=whsec_x", "a name before '='"), ("crm=", "a value after '='")]:
        monkeypatch.setenv("ONCEONLY_STANDARD_WEBHOOK_SECRETS", value)

        with pytest.raises(ConfigError, match=words):
            Settings.from_env()
