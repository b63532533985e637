"""A local development secret for AgentMail, so ``make run`` answers a first event.

With no provider secret set, ``python -m devstack up`` creates
``$ONCEONLY_RUN_DIR/agentmail-dev-secret``
once (a Svix ``whsec_`` secret of 24 random bytes, readable by its owner only), configures
ingest (every ingest process: through the environment its children inherit) and the
worker with it and prints it, as ``stripe listen`` prints its secret.
``python -m devstack send`` finds it there too. A secret in the environment always wins.
"""

from __future__ import annotations

import base64
import os
import secrets
from pathlib import Path

from pydantic import SecretStr

from onceonly.foundation.settings import Settings

FILE_NAME = "agentmail-dev-secret"
VARIABLE = "ONCEONLY_AGENTMAIL_WEBHOOK_SECRET"


def has_any_secret(settings: Settings) -> bool:
    """True when some provider's webhook secret is configured."""
    return any(
        (
            settings.agentmail_webhook_secret,
            settings.nylas_webhook_secret,
            settings.stripe_webhook_secret,
            settings.github_webhook_secret,
            settings.standard_webhook_secrets,
        )
    )


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def read_dev_secret(run_dir: Path) -> str | None:
    """The development secret under ``run_dir``, if ``python -m devstack up`` made one."""
    try:
        return (run_dir / FILE_NAME).read_text().strip() or None
    except FileNotFoundError:
        return None


def ensure_dev_secret(run_dir: Path) -> str:
    """The development secret under ``run_dir``, created (mode 0600) on first use."""
    existing = read_dev_secret(run_dir)
    if existing is not None:
        return existing
    run_dir.mkdir(parents=True, exist_ok=True)
    secret = new_secret()
    fd = os.open(run_dir / FILE_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secret + "\n")
    return secret


def with_dev_secret(settings: Settings, secret: str) -> Settings:
    """``settings`` with AgentMail's webhook secret set to ``secret``."""
    return settings.model_copy(update={"agentmail_webhook_secret": SecretStr(secret)})


def dev_secret_env(secret: str) -> dict[str, str]:
    """The variable that hands ``secret`` to the processes ``python -m devstack up`` starts: the
    ingest processes of ONCEONLY_INGEST_PROCESSES > 1 read their settings afresh."""
    return {VARIABLE: secret}
