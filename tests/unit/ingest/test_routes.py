"""Each configured provider has a plain path of its own, ahead of the {provider} patterns."""

from __future__ import annotations

from typing import Any, cast

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from pydantic import SecretStr

from onceonly.foundation.settings import Settings
from onceonly.ingest.app import _PLAIN_NAME, Ingest
from testkit import signing


def _app() -> web.Application:
    settings = Settings(
        nylas_webhook_secret=SecretStr(signing.NYLAS_SECRET),
        standard_webhook_secrets={"crm": SecretStr(signing.STANDARD_SECRET)},
    )
    # routing only: no handler runs, so no producer or admin client is needed
    return Ingest(settings, cast(Any, None), cast(Any, None)).app()


async def _resource(app: web.Application, method: str, path: str) -> web.AbstractResource:
    match = await app.router.resolve(make_mocked_request(method, path, app=app))
    assert match.http_exception is None, f"{method} {path}: {match.http_exception}"
    return match.route.resource  # type: ignore[return-value]


@pytest.mark.parametrize("path", ["/webhooks/nylas", "/webhooks/standard/crm"])
async def test_a_configured_provider_is_a_plain_path(path: str) -> None:
    resource = await _resource(_app(), "POST", path)
    assert isinstance(resource, web.PlainResource)
    assert resource.canonical == path


async def test_others_still_reach_the_patterns_that_answer_404() -> None:
    app = _app()
    assert isinstance(await _resource(app, "POST", "/webhooks/stripe"), web.DynamicResource)
    assert isinstance(
        await _resource(app, "POST", "/webhooks/standard/billing"), web.DynamicResource
    )


async def test_the_nylas_challenge_still_answers_get() -> None:
    resource = await _resource(_app(), "GET", "/webhooks/nylas")
    assert resource.canonical == "/webhooks/nylas"


@pytest.mark.parametrize(
    ("name", "plain"),
    [
        ("agentmail", True),
        ("standard/crm-eu_1.x", True),
        ("standard/a b", False),  # the router would quote it
        ("standard/{x}", False),  # a pattern
        ("standard/%41", False),  # decoded before matching
        ("a/b/c", False),
    ],
)
def test_only_names_that_are_paths_as_they_stand_get_one(name: str, plain: bool) -> None:
    assert bool(_PLAIN_NAME.fullmatch(name)) is plain
