"""Each registered mail provider implements the whole protocol, real and dry run; each dry
run speaks its own provider's shapes, so the provider's channel reads its history."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from onceonly.foundation.providers import MAIL
from onceonly.foundation.settings import Settings
from onceonly.processors.mail.agentmail.channel import AgentMailChannel
from onceonly.processors.mail.agentmail.dry_run import AgentMailDryRun
from onceonly.processors.mail.nylas.channel import NylasChannel
from onceonly.processors.mail.nylas.dry_run import NylasDryRun
from onceonly.processors.mail.outbox import DryRunOutbox
from onceonly.processors.mail.protocol import MailClient, MailProvider
from onceonly.processors.mail.registry import REGISTRY, Registered, dry_runs, mail_providers
from onceonly.processors.writer.contract import Inbound, ThreadMessage
from onceonly.schemas.ledger import ReplyRecord, ReplyState

AT = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
GRANT = "grant-1"
AGENT = "agent@acme.example"
INBOX = "support@acme.example"


def _settings(tmp_path: Path, **keys: Any) -> Settings:
    return Settings(run_dir=tmp_path, nylas_webhook_secret=SecretStr("s"), **keys)


def _members(protocol: type) -> dict[str, Any]:
    """The protocol's own members: its methods and properties, as the class declares them."""
    return {
        name: value
        for name, value in vars(protocol).items()
        if not name.startswith("_") and (callable(value) or isinstance(value, property))
    }


def missing(impl: object, protocol: type) -> list[str]:
    """What ``impl`` lacks of ``protocol``, or declares otherwise (sync for async, other
    parameters); empty when it implements the whole protocol."""
    problems: list[str] = []
    for name, declared in _members(protocol).items():
        if not hasattr(type(impl), name) and not hasattr(impl, name):
            problems.append(f"{name}: missing")
            continue
        if isinstance(declared, property):
            continue  # a property or a field: hasattr above was the check
        found = getattr(impl, name)
        if inspect.iscoroutinefunction(declared) and not inspect.iscoroutinefunction(found):
            problems.append(f"{name}: not async")
        wants_iterator = "AsyncIterator" in str(inspect.signature(declared).return_annotation)
        if wants_iterator and not inspect.isasyncgenfunction(found):
            problems.append(f"{name}: not an async generator")
        expected = list(inspect.signature(declared).parameters)[1:]  # without self
        given = [
            p.name
            for p in inspect.signature(found).parameters.values()
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        if len(given) != len(expected):
            problems.append(f"{name}: takes {given}, the protocol {expected}")
    return problems


async def _both(entry: Registered, settings: Settings) -> list[MailProvider]:
    """The provider over its API client and over its dry run."""
    client = entry.client(settings, CollectorRegistry())
    assert client is not None, f"{entry.name}: no client with its API key set"
    dry = entry.dry_run(settings, DryRunOutbox())
    return [entry.channel(settings, client), entry.channel(settings, dry)]


def test_the_registry_holds_every_mail_provider_and_no_other() -> None:
    assert tuple(REGISTRY) == MAIL
    assert all(entry.name == name and entry.route.mail for name, entry in REGISTRY.items())


@pytest.mark.parametrize("name", MAIL)
async def test_each_provider_implements_the_whole_protocol_real_and_dry(
    name: str, tmp_path: Path
) -> None:
    settings = _settings(tmp_path, agentmail_api_key=SecretStr("k"), nylas_api_key=SecretStr("k"))

    for provider in await _both(REGISTRY[name], settings):
        assert isinstance(provider, MailProvider) and provider.name == name
        assert missing(provider, MailProvider) == []
        assert isinstance(provider.sender, MailClient)
        assert missing(provider.sender, MailClient) == []
        await provider.sender.aclose()


def test_the_check_sees_a_method_missing_or_of_the_wrong_kind() -> None:
    class Partial:
        dry_run = True

        async def reply(self, record: ReplyRecord) -> str:
            return ""

        def find_reply(self, record: ReplyRecord) -> str | None:  # not async
            return None

        async def messages_since(self, account: str) -> list[Any]:  # no since, no generator
            return []

    problems = missing(Partial(), MailClient)

    assert "find_reply: not async" in problems and "fetch: missing" in problems
    assert "messages_since: not an async generator" in problems
    assert any(p.startswith("messages_since: takes") for p in problems)


def test_without_an_api_key_each_configured_provider_is_a_dry_run_over_one_outbox(
    tmp_path: Path,
) -> None:
    providers = mail_providers(_settings(tmp_path))

    assert list(providers) == list(MAIL)
    assert all(p.sender.dry_run for p in providers.values())
    assert [e.name for e in dry_runs(_settings(tmp_path))] == list(MAIL)
    outboxes = {id(p.sender.outbox) for p in providers.values()}  # type: ignore[attr-defined]
    assert len(outboxes) == 1


def _record(account: str, message_id: str, thread_key: str, channel: str) -> ReplyRecord:
    return ReplyRecord(
        f"reply-{message_id}",
        account,
        message_id,
        thread_key,
        ReplyState.PENDING,
        AT,
        "Thanks, Friday works.",
        channel=channel,
    )


def _inbound(account: str, message_id: str, thread_key: str, thread_id: str) -> Inbound:
    return Inbound(account, message_id, thread_key, thread_id, "evt", AT, "c@x", None, "more")


async def test_the_nylas_dry_run_thread_is_nylas_shaped_and_its_channel_reads_it() -> None:
    outbox = DryRunOutbox()
    dry = NylasDryRun(outbox, own_address=AGENT)
    channel = NylasChannel(dry, own_address=AGENT)
    sent = await dry.reply(_record(GRANT, "m1", "nylas:t1", "nylas"))

    [message] = await dry.thread(GRANT, "t1")
    history = await channel.history(_inbound(GRANT, "m2", "nylas:t1", "t1"))

    assert message["id"] == sent and message["grant_id"] == GRANT
    assert message["from"] == [{"email": AGENT}] and message["folders"] == ["SENT"]
    assert message["body"] == "Thanks, Friday works." and message["date"] == int(AT.timestamp())
    assert history == [
        ThreadMessage(sent, AGENT, "Thanks, Friday works.", AT, own=True, subject=None)
    ]


async def test_the_agentmail_dry_run_thread_is_agentmail_shaped_and_its_channel_reads_it() -> None:
    dry = AgentMailDryRun(DryRunOutbox())
    channel = AgentMailChannel(dry)
    sent = await dry.reply(_record(INBOX, "<m1@x>", "agentmail:t1", "agentmail"))

    [message] = await dry.thread(INBOX, "t1")
    history = await channel.history(_inbound(INBOX, "<m2@x>", "agentmail:t1", "t1"))

    assert (message["message_id"], message["in_reply_to"]) == (sent, "<m1@x>")
    assert message["labels"] == ["sent"] and message["from"] == INBOX
    assert history == [ThreadMessage(sent, INBOX, "Thanks, Friday works.", AT, own=True)]


@pytest.mark.parametrize("name", ["nylas", "agentmail"])
async def test_a_channels_thread_of_a_record_is_every_message_of_its_thread_in_order(
    name: str,
) -> None:
    # history stops before a message; thread_of (a decision's read, F28) reads them all
    dry: Any = NylasDryRun(DryRunOutbox(), own_address=AGENT)
    channel: Any = NylasChannel(dry, own_address=AGENT)
    account = GRANT
    if name == "agentmail":
        dry, account = AgentMailDryRun(DryRunOutbox()), INBOX
        channel = AgentMailChannel(dry)
    first = await dry.reply(_record(account, "m1", f"{name}:t1", name))
    second = await dry.reply(_record(account, "m2", f"{name}:t1", name))

    whole = await channel.thread_of(_record(account, "m1", f"{name}:t1", name))
    before = await channel.history(_inbound(account, second, f"{name}:t1", "t1"))

    assert [m.message_id for m in whole] == [first, second]
    assert [m.message_id for m in before] == [first]


async def test_a_dry_run_thread_holds_only_its_own_providers_replies_to_that_thread() -> None:
    outbox = DryRunOutbox()
    nylas, agentmail = NylasDryRun(outbox, own_address=AGENT), AgentMailDryRun(outbox)
    await nylas.reply(_record(GRANT, "m1", "nylas:t1", "nylas"))
    await agentmail.reply(_record(INBOX, "m2", "agentmail:t1", "agentmail"))
    await nylas.reply(_record(GRANT, "m3", "nylas:t10", "nylas"))

    assert [m["id"] for m in await nylas.thread(GRANT, "t1")] == ["<dry-run-reply-m1@onceonly>"]
    assert [m["message_id"] for m in await agentmail.thread(INBOX, "t1")] == [
        "<dry-run-reply-m2@onceonly>"
    ]


async def _listed(client: MailClient) -> list[dict[str, Any]]:
    found: AsyncIterator[dict[str, Any]] = client.messages_since(GRANT, AT)
    return [m async for m in found]


@pytest.mark.parametrize("name", MAIL)
async def test_a_dry_run_lists_nothing_and_fetches_nothing(name: str) -> None:
    from onceonly.processors.exceptions import SendError

    dry = REGISTRY[name].dry_run(Settings(), DryRunOutbox())

    assert dry.dry_run and await _listed(dry) == []
    with pytest.raises(SendError):
        await dry.fetch(GRANT, "m1")


def test_a_given_client_replaces_the_one_the_settings_would_build(tmp_path: Path) -> None:
    given = AgentMailDryRun(DryRunOutbox())

    providers = mail_providers(
        Settings(run_dir=tmp_path, agentmail_api_key=SecretStr("k")),  # a real one otherwise
        clients={"agentmail": given},
    )

    assert list(providers) == ["agentmail"] and providers["agentmail"].sender is given
