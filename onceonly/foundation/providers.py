"""The providers by name, written once: each webhook route ingest serves, the scheme that
verifies it, the setting that holds its secret, and whether it is a mail provider.

This is the names-only half of the provider registry. It lives here, below both
services, because ingest (routes, verifiers, normalisers) and the worker (mail
providers) read it and may not import each other. The mail providers' implementations
(clients, dry runs, channels, catch-up listing) are registered by the same names in
:mod:`onceonly.processors.mail.registry`; ``python -m devstack up`` and ``send`` and
``onceonly catch-up`` read these names too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from pydantic import SecretStr

__all__ = [
    "ALL",
    "CATCHUP_LOOK_BACK",
    "MAIL",
    "NAMES",
    "ROUTES",
    "STANDARD",
    "Route",
    "RouteSettings",
    "by_name",
    "configured",
]


class RouteSettings(Protocol):
    """What the routes read of the settings: the webhook secrets and Stripe's tolerance.

    :class:`~onceonly.foundation.settings.Settings` is one; this module does not import
    it, because the settings import the names from here (to check
    ``ONCEONLY_DEDUPE_RETENTION_BY_PROVIDER``): the names sit below the settings.
    """

    @property
    def agentmail_webhook_secret(self) -> SecretStr | None: ...
    @property
    def nylas_webhook_secret(self) -> SecretStr | None: ...
    @property
    def stripe_webhook_secret(self) -> SecretStr | None: ...
    @property
    def github_webhook_secret(self) -> SecretStr | None: ...
    @property
    def standard_webhook_secrets(self) -> Mapping[str, SecretStr]: ...
    @property
    def stripe_tolerance_s(self) -> int: ...


def _no_options(settings: RouteSettings) -> dict[str, object]:
    return {}


@dataclass(frozen=True, slots=True)
class Route:
    """One provider's webhook route: ``POST /webhooks/<name>``."""

    name: str  #: its path under /webhooks/, and the provider its envelopes name
    verifier: str  #: its scheme in :data:`onceonly.ingest.verify.VERIFIERS`
    secret: Callable[[RouteSettings], SecretStr | None]  #: its webhook secret, if set
    mail: bool = False  #: a mail provider: the worker answers its messages
    #: keyword arguments its verifier takes from the settings (Stripe's tolerance)
    options: Callable[[RouteSettings], dict[str, object]] = _no_options
    #: the environment variable of its secret, if not ``ONCEONLY_<NAME>_WEBHOOK_SECRET``
    secret_variable: str | None = None

    @property
    def variable(self) -> str:
        """The environment variable of its webhook secret."""
        return self.secret_variable or f"ONCEONLY_{self.name.upper()}_WEBHOOK_SECRET"


#: the providers with a route of their own, in the order they are announced
ROUTES: tuple[Route, ...] = (
    Route("agentmail", "svix", lambda s: s.agentmail_webhook_secret, mail=True),
    Route("nylas", "nylas", lambda s: s.nylas_webhook_secret, mail=True),
    Route(
        "stripe",
        "stripe",
        lambda s: s.stripe_webhook_secret,
        options=lambda s: {"tolerance_s": s.stripe_tolerance_s},
    ),
    Route("github", "github", lambda s: s.github_webhook_secret),
)
#: Standard Webhooks: one route per source, ``standard/<source>``, each with its own secret
#: (``ONCEONLY_STANDARD_WEBHOOK_SECRETS``); its envelopes name ``standard.<source>``
STANDARD = Route(
    "standard/<source>",
    "standard",
    lambda s: None,
    secret_variable="ONCEONLY_STANDARD_WEBHOOK_SECRETS",
)
#: the provider names envelopes carry (besides ``standard.<source>``)
NAMES: tuple[str, ...] = tuple(r.name for r in ROUTES)
#: every route, ``standard/<source>`` last (what ``python -m devstack up`` announces)
ALL: tuple[str, ...] = (*NAMES, STANDARD.name)
#: the mail providers: the worker answers their messages
MAIL: tuple[str, ...] = tuple(r.name for r in ROUTES if r.mail)


#: how far back a catch-up without --since lists at least, per mail provider (the
#: reasoning is onceonly.operations.catchup.LOOK_BACK's); here, below the settings,
#: because ONCEONLY_LEDGER_RETENTION may never be shorter than the longest of them
CATCHUP_LOOK_BACK: Mapping[str, timedelta] = {
    "agentmail": timedelta(days=7),
    "nylas": timedelta(days=5),
}


def by_name(name: str) -> Route:
    """The route called ``name`` (``standard/<source>``: the Standard Webhooks route)."""
    if name.startswith("standard/"):
        return STANDARD
    for route in ROUTES:
        if route.name == name:
            return route
    raise KeyError(name)


def configured(settings: RouteSettings) -> dict[str, tuple[Route, str]]:
    """Route path -> (its route, its secret) for each route whose secret is set, in order;
    ``standard/<source>`` once per configured source."""
    out: dict[str, tuple[Route, str]] = {}
    for route in ROUTES:
        secret = route.secret(settings)
        if secret is not None:
            out[route.name] = (route, secret.get_secret_value())
    for source, secret in settings.standard_webhook_secrets.items():
        out[f"standard/{source}"] = (STANDARD, secret.get_secret_value())
    return out
