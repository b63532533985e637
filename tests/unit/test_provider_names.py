"""The provider names are written once (onceonly.foundation.providers, and the mail
providers' implementations in onceonly.processors.mail.registry): ingest's routes,
catch-up, ``python -m devstack send`` and ``up`` read them from there."""

from __future__ import annotations

import ast
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import SecretStr

from devstack import cli_send
from onceonly.foundation import providers
from onceonly.foundation.errors import ConfigError
from onceonly.foundation.providers import ALL, MAIL, NAMES, ROUTES, STANDARD
from onceonly.foundation.settings import PROVIDERS, Settings
from onceonly.ingest import app, normalise, verify
from onceonly.operations import catchup
from onceonly.processors.mail.registry import REGISTRY, catch_up_provider
from testkit import samples, signing

ROOT = Path(__file__).resolve().parents[2]
#: where provider names may be listed: the registry's two halves
REGISTRY_FILES = {"onceonly/foundation/providers.py", "onceonly/processors/mail/registry.py"}


def _every_secret(**more: object) -> Settings:
    return Settings(
        agentmail_webhook_secret=SecretStr(signing.SVIX_SECRET),
        nylas_webhook_secret=SecretStr(signing.NYLAS_SECRET),
        stripe_webhook_secret=SecretStr(signing.STRIPE_SECRET),
        github_webhook_secret=SecretStr(signing.GITHUB_SECRET),
        standard_webhook_secrets={"crm": SecretStr(signing.STANDARD_SECRET)},
        **more,  # type: ignore[arg-type]
    )


def test_the_registry_names_each_route_once_with_a_verifier_ingest_has() -> None:
    assert len(set(NAMES)) == len(NAMES) and set(MAIL) <= set(NAMES)
    assert (*NAMES, STANDARD.name) == ALL
    assert {r.verifier for r in (*ROUTES, STANDARD)} == set(verify.VERIFIERS)
    assert PROVIDERS == NAMES  # the settings' check of ONCEONLY_DEDUPE_RETENTION_BY_PROVIDER


def test_ingest_serves_the_registrys_routes_and_names_its_metrics_after_them() -> None:
    assert set(normalise.NORMALISERS) == set(NAMES)
    assert list(app.providers_from_settings(_every_secret())) == [*NAMES, "standard/crm"]
    assert app.ALL_PROVIDERS == ALL and set(NAMES) == app.KNOWN_PROVIDERS


def test_each_route_verifies_and_normalises_as_its_provider(tmp_path: Path) -> None:
    configured = app.providers_from_settings(_every_secret())
    for name, secret in cli_send.signing_secrets(_every_secret(run_dir=tmp_path)).items():
        provider = configured[name]
        for sample in samples.samples(name, secret, copies=1, now=datetime.now(UTC)):
            provider.verify(sample.body, sample.headers)  # raises if the route's check is wrong
            envelope = provider.normalise(sample.body.decode(), sample.headers, datetime.now(UTC))
            assert envelope.provider == name.replace("/", ".")


def test_send_offers_and_signs_the_registrys_routes(tmp_path: Path) -> None:
    assert samples.PROVIDERS == ALL
    assert set(samples.DEFAULT_PAYLOADS) == set(NAMES)
    assert set(samples.SIGNERS) == {r.verifier for r in (*ROUTES, STANDARD)}
    assert list(cli_send.signing_secrets(_every_secret(run_dir=tmp_path))) == [
        *NAMES,
        "standard/crm",
    ]
    help_text = next(p.help for p in cli_send.send.params if p.name == "provider")
    assert help_text is not None and all(route in help_text for route in ALL)


def test_catch_up_lists_through_the_registrys_mail_providers() -> None:
    settings = Settings(agentmail_api_key=SecretStr("k"), nylas_api_key=SecretStr("k"))

    assert tuple(REGISTRY) == MAIL
    for name in MAIL:
        assert catch_up_provider(settings, name).name == name
    inbox = catchup.source_for(settings, "support@acme.example", None)
    grant = catchup.source_for(settings, None, "grant-1")
    assert (inbox.provider.name, grant.provider.name) == ("agentmail", "nylas")
    with pytest.raises(ConfigError, match="NYLAS_API_KEY"):
        catchup.source_for(Settings(), None, "grant-1")
    with pytest.raises(ConfigError, match="no mail provider"):
        catch_up_provider(settings, "stripe")


def _name_lists(path: Path) -> list[int]:
    """Lines of tuple, list or set literals that name two providers or more."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            names = {e.value for e in node.elts if isinstance(e, ast.Constant)}
            if len(names & set(NAMES)) >= 2:
                found.append(node.lineno)
    return found


@pytest.mark.parametrize(
    "path",
    [
        *sorted((ROOT / "onceonly").rglob("*.py")),
        ROOT / "devstack" / "cli_up.py",
        ROOT / "devstack" / "cli_send.py",
        ROOT / "testkit" / "samples.py",
    ],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_no_other_module_lists_the_providers(path: Path) -> None:
    if str(path.relative_to(ROOT)) in REGISTRY_FILES:
        assert providers.ROUTES  # the registry itself
        return
    assert _name_lists(path) == []


def test_the_list_check_sees_a_list_of_names(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('ROUTES = ("agentmail", "nylas", "stripe")\n')

    assert _name_lists(module) == [1]
