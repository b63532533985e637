"""The mail providers by name: for each, its route (names only, from
:mod:`onceonly.foundation.providers`), its mail client factory, its dry run, its channel,
and whether the worker answers it. The worker builds its channels here, and
``onceonly catch-up`` its lister; no other module lists the mail providers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from onceonly.foundation.errors import ConfigError
from onceonly.foundation.providers import Route, by_name
from onceonly.foundation.settings import Settings
from onceonly.processors.mail.agentmail import channel as agentmail
from onceonly.processors.mail.nylas import channel as nylas
from onceonly.processors.mail.outbox import OUTBOX_FILE, DryRunOutbox
from onceonly.processors.mail.protocol import MailClient, MailProvider

__all__ = ["REGISTRY", "Registered", "catch_up_provider", "dry_runs", "mail_providers"]


@dataclass(frozen=True, slots=True)
class Registered:
    """One mail provider, as the worker and catch-up build it."""

    route: Route  #: its name, route and verifier (what ingest reads)
    key_variable: str  #: the environment variable of its API key
    api_key: Callable[[Settings], SecretStr | None]  #: its API key; without it, a dry run
    #: whether the worker answers it with these settings
    configured: Callable[[Settings], bool]
    #: its API client, None without an API key
    client: Callable[[Settings, CollectorRegistry | None], MailClient | None]
    #: its dry run, over the outbox all dry runs share
    dry_run: Callable[[Settings, DryRunOutbox], MailClient]
    #: its channel over a client (real or dry run)
    channel: Callable[[Settings, MailClient], MailProvider]

    @property
    def name(self) -> str:
        return self.route.name


#: the one table of mail providers, keyed by :data:`onceonly.foundation.providers.MAIL`
REGISTRY: Mapping[str, Registered] = MappingProxyType(
    {
        "agentmail": Registered(
            by_name("agentmail"),
            "AGENTMAIL_API_KEY",
            lambda s: s.agentmail_api_key,
            agentmail.configured,
            agentmail.client,
            agentmail.dry_run,
            agentmail.channel,
        ),
        "nylas": Registered(
            by_name("nylas"),
            "NYLAS_API_KEY",
            lambda s: s.nylas_api_key,
            nylas.configured,
            nylas.client,
            nylas.dry_run,
            nylas.channel,
        ),
    }
)


def mail_providers(
    settings: Settings,
    *,
    registry: CollectorRegistry | None = None,
    clients: Mapping[str, MailClient] | None = None,
) -> dict[str, MailProvider]:
    """The worker's channels: each configured provider over ``clients[name]`` if given,
    else its API client, else its dry run (all dry runs write one outbox)."""
    outbox = DryRunOutbox(settings.run_dir / OUTBOX_FILE)
    given = clients or {}
    out: dict[str, MailProvider] = {}
    for name, entry in REGISTRY.items():
        if name not in given and not entry.configured(settings):
            continue
        client = given[name] if name in given else entry.client(settings, registry)
        out[name] = entry.channel(
            settings, entry.dry_run(settings, outbox) if client is None else client
        )
    return out


def catch_up_provider(settings: Settings, name: str) -> MailProvider:
    """Provider ``name`` over its API client, for catch-up; ConfigError without its key."""
    entry = REGISTRY.get(name)
    if entry is None:
        raise ConfigError(f"{name!r} is no mail provider; use one of {', '.join(REGISTRY)}")
    client = entry.client(settings, None)
    if client is None:
        raise ConfigError(f"catch-up lists messages through {name}: set {entry.key_variable}")
    return entry.channel(settings, client)


def dry_runs(settings: Settings) -> list[Registered]:
    """The providers the worker answers as a dry run (configured, without an API key)."""
    return [e for e in REGISTRY.values() if e.configured(settings) and e.api_key(settings) is None]
