"""Catch-up: list what arrived while webhooks were not, and feed it through.

AgentMail disables an endpoint after ~5 days of failures and never redelivers what it
missed; its own catch-up path is to list messages after a time, and Nylas's too. Each
message the mail provider lists (``MailClient.messages_since``) that is not the agent's
own becomes an envelope, as if its webhook had come
(:meth:`~onceonly.processors.mail.protocol.MailProvider.missed`, then ingest's own
normaliser), with a deterministic event id, keyed by its thread, and is fed as soon as it
is listed: the pages are streamed, never listed whole first. What the reply ledger already
answered is skipped by message id, not fed: each listed message's reply key is looked up
in the operator index when one is built (:func:`ledger_for`), else in the whole ledger
read once into a compact set (:class:`~onceonly.operations.answered.Answered`). Without a
start it lists ``look_back`` (:func:`look_back_for`: the provider's documented horizon, or
``ONCEONLY_CATCHUP_LOOKBACK``) back, or further to the account's last message recorded
before then (:func:`window_for`), so mail answered since an outage never hides the mail
the outage lost. The providers and their API clients
come from :mod:`onceonly.processors.mail.registry`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Container, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from onceonly.foundation.errors import ConfigError
from onceonly.foundation.kafka import Connection
from onceonly.foundation.providers import CATCHUP_LOOK_BACK
from onceonly.foundation.settings import Settings
from onceonly.ingest import normalise
from onceonly.operations.answered import SETTLED as SETTLED
from onceonly.operations.answered import Answered as Answered
from onceonly.operations.answered import Ledger as Ledger
from onceonly.operations.answered import last_answered as last_answered
from onceonly.operations.answered import read_answered as read_answered
from onceonly.processors.mail.protocol import MailProvider, Missed
from onceonly.schemas.envelope import Envelope
from onceonly.schemas.ledger import ReplyRecord

log = structlog.get_logger("onceonly.catchup")


def envelope_for(provider: str, missed: Missed, received_at: datetime) -> Envelope:
    """The envelope ingest would have made from the webhook ``missed`` stands for."""
    webhook = json.dumps(missed.webhook, default=str)
    return normalise.for_route(provider)(webhook, {}, received_at)


def read_ledger(connection: Connection, topic: str) -> dict[str, ReplyRecord]:
    """The compacted reply ledger as a dict (the latest record per key; effects left out):
    what ``onceonly approvals`` reads. Catch-up reads the compact :func:`read_answered`."""
    from onceonly.foundation.kafka import read_to_end
    from onceonly.schemas.exceptions import SchemaError

    out: dict[str, ReplyRecord] = {}
    for msg in read_to_end(connection, topic):
        key = (msg.key() or b"").decode()
        if msg.value() is None:
            out.pop(key, None)
            continue
        try:
            out[key] = ReplyRecord.decode(msg.value())
        except SchemaError:
            continue
    return out


#: how far back a catch-up without --since lists at least, per provider: the provider's
#: documented horizon after which mail it failed to deliver is never redelivered and
#: the endpoint is off, plus two days for on-call to notice and act (docs/configuration.md,
#: ONCEONLY_CATCHUP_LOOKBACK). AgentMail (Svix): the last retry of an event comes ~28 h
#: after it, and an endpoint failing for 5 days is disabled: 5 + 2 = 7 days. Nylas: a
#: notification is retried for ~20 min, an endpoint failing for 72 h is marked failed
#: (and its notification addresses emailed): 3 + 2 = 5 days.
#: (The values live in onceonly.foundation.providers: the ledger's retention is checked
#: against them.)
LOOK_BACK: Mapping[str, timedelta] = CATCHUP_LOOK_BACK


def look_back_for(provider: str, setting: timedelta | None) -> timedelta:
    """The look-back of a catch-up (pure): the setting (or --look-back) if given, else the
    provider's documented horizon (:data:`LOOK_BACK`), else the longest of them."""
    if setting is not None:
        return setting
    return LOOK_BACK.get(provider, max(LOOK_BACK.values()))


@dataclass(frozen=True, slots=True)
class Window:
    """Where a catch-up lists from, and why there."""

    start: datetime
    why: str


def window_for(
    answered: Ledger,
    account: str,
    now: datetime,
    *,
    since: datetime | None = None,
    look_back: timedelta = LOOK_BACK["agentmail"],
) -> Window | None:
    """Where a catch-up starts (pure): at ``since`` (UTC if it has no zone) if given; else
    at the latest message of the account the ledger recorded ``look_back`` or more before
    ``now``, else ``look_back`` before ``now``. Mail answered since an outage (after a
    webhook was re-enabled) never moves the start past the mail the outage lost: an outage
    that ended within ``look_back`` is listed from its beginning. None without ``since`` if
    the ledger holds nothing of the account: nothing says where its mail began to be
    answered."""
    if since is not None:
        return Window(since if since.tzinfo else since.replace(tzinfo=UTC), "--since")
    if last_answered(answered, account) is None:
        return None
    horizon = now - look_back
    back = f"{look_back.total_seconds() / 86400:g} days back"
    anchor = last_answered(answered, account, before=horizon)
    if anchor is None:
        return Window(horizon, f"{back}; the ledger records no earlier message of it")
    why = f"its last message the ledger recorded before {back}: an outage that ended since"
    return Window(anchor, why + " is listed whole")


def window_line(label: str, window: Window, now: datetime) -> str:
    """What a catch-up says it listed (pure)."""
    start, end = (t.isoformat(timespec="seconds") for t in (window.start, now))
    return f"listed {label} from {start} to {end} ({window.why})"


@dataclass
class Summary:
    found: int = 0
    fed: list[str] = field(default_factory=list)  #: reply keys fed to the pipeline
    skipped_sent_by_agent: int = 0
    skipped_answered: int = 0
    #: messages older than this are not fed: past ONCEONLY_LEDGER_RETENTION the worker
    #: answers none (their replies' records may be gone; docs/guarantees.md)
    not_before: datetime | None = None
    skipped_past_retention: int = 0

    async def feed(
        self,
        key: str,
        envelope: Envelope,
        *,
        answered: Ledger,
        feed: Callable[[Envelope], Any],
    ) -> None:
        """Feed one answerable message unless the ledger holds its reply settled, or it
        is past the ledger's retention."""
        if self.not_before is not None and envelope.occurred_at < self.not_before:
            self.skipped_past_retention += 1
            log.warning(
                "catch-up skipped a message older than the ledger's retention",
                reply_key=key,
                message_id=envelope.message_id,
                message_at=envelope.occurred_at.isoformat(),
            )
            return
        if key in answered.settled:
            self.skipped_answered += 1
            log.info(
                "catch-up skipped a message already answered",
                reply_key=key,
                message_id=envelope.message_id,
                event_id=envelope.event_id,
            )
            return
        self.fed.append(key)
        result = feed(envelope)
        if hasattr(result, "__await__"):
            await result

    def answered(self, settled: Container[str]) -> int:
        return sum(1 for key in self.fed if key in settled)


async def catch_up(
    provider: MailProvider,
    account: str,
    since: datetime,
    *,
    answered: Ledger,
    feed: Callable[[Envelope], Any],
    progress: Callable[[Summary], None] = lambda _: None,
    not_before: datetime | None = None,
) -> Summary:
    """Feed each unanswered message ``provider`` lists for ``account`` after ``since``
    through the pipeline as it is listed, oldest first (AgentMail's pages stream as they
    come; Nylas lists newest first, so its client reads every page before the first
    message); the account's own mail is counted as sent by the agent."""
    from onceonly.processors.messages import reply_key

    summary = Summary(not_before=not_before)
    async for message in provider.sender.messages_since(account, since):
        summary.found += 1
        missed = await provider.missed(account, message)
        if missed is None:
            summary.skipped_sent_by_agent += 1
            log.info(
                "catch-up skipped the account's own mail",
                account=account,
                message_id=message.get("message_id") or message.get("id"),
            )
        else:
            key = reply_key(account, missed.message_id)
            envelope = envelope_for(provider.name, missed, datetime.now(UTC))
            await summary.feed(key, envelope, answered=answered, feed=feed)
        progress(summary)
    return summary


# -- what ``onceonly catch-up`` runs -------------------------------------------------


@dataclass(frozen=True, slots=True)
class Source:
    """The account a catch-up lists, over its provider's API client, which
    :func:`feed_unanswered` closes when it is done."""

    provider: MailProvider
    account: str
    label: str


def source_for(settings: Settings, inbox_id: str | None, nylas_grant: str | None) -> Source:
    """An AgentMail inbox or a Nylas grant, over the provider the registry builds;
    ConfigError if the provider's API key is missing."""
    from onceonly.processors.mail.registry import catch_up_provider

    if nylas_grant is not None:
        name, account, label = "nylas", nylas_grant, f"grant {nylas_grant}"
    elif inbox_id is not None:
        name, account, label = "agentmail", inbox_id, inbox_id
    else:
        raise ConfigError("name an AgentMail inbox (--inbox) or a Nylas grant (--nylas-grant)")
    return Source(catch_up_provider(settings, name), account, label)


#: envelopes handed to the producer and not yet acknowledged, at most: feeding does not
#: wait for each acknowledgement in turn (a linger and a round trip each) nor hold a
#: whole listing's records in memory
IN_FLIGHT = 1000


class Feeder:
    """Produces each envelope to the deliveries topic, up to :data:`IN_FLIGHT` at once."""

    def __init__(self, settings: Settings, producer: Any) -> None:
        self._settings = settings
        self._producer = producer
        self._pending: set[asyncio.Future[Any]] = set()

    async def __call__(self, envelope: Envelope) -> None:
        value = envelope.encode()
        produced = self._producer.produce(
            self._settings.deliveries_topic,
            value,
            key=envelope.thread_key.encode(),
            headers=envelope.headers(self._settings.envelope_mac_key, value),
        )
        self._pending.add(asyncio.ensure_future(produced))
        if len(self._pending) >= IN_FLIGHT:
            done, self._pending = await asyncio.wait(
                self._pending, return_when=asyncio.FIRST_COMPLETED
            )
            for task in done:
                task.result()  # a failed produce fails the catch-up

    async def drain(self) -> None:
        """Wait until every envelope is acknowledged; raise the first failure."""
        pending, self._pending = self._pending, set()
        for task in await asyncio.gather(*pending, return_exceptions=True):
            if isinstance(task, BaseException):
                raise task

    def cancel(self) -> None:
        for task in self._pending:
            task.cancel()


async def feed_unanswered(
    settings: Settings,
    source: Source,
    start: datetime,
    answered: Ledger,
    *,
    progress: Callable[[Summary], None] = lambda _: None,
) -> Summary:
    """List the account's mail after ``start`` and feed the unanswered through the
    pipeline as it is listed; close the producer and the mail API's HTTP session after,
    whatever happened."""
    from onceonly.foundation.kafka import AsyncProducer

    producer = AsyncProducer(Connection.from_settings(settings))
    feeder = Feeder(settings, producer)
    try:
        summary = await catch_up(
            source.provider,
            source.account,
            start,
            answered=answered,
            feed=feeder,
            progress=progress,
            not_before=datetime.now(UTC) - settings.ledger_retention,
        )
        await feeder.drain()
        return summary
    finally:
        feeder.cancel()
        producer.close()
        await source.provider.sender.aclose()


@dataclass(frozen=True, slots=True)
class LedgerAnswer:
    ledger: Ledger
    source: str  #: what answered, for the person reading it


@contextmanager
def ledger_for(settings: Settings) -> Iterator[LedgerAnswer]:
    """What catch-up compares each listed message with, open while it lists: the operator
    index when one is built (a lookup per listed message, with the ledger records it had not
    read yet), else the whole ledger topic read once; and which, to say."""
    from onceonly.operations import index

    reason = index.no_index_reason(settings)
    if reason is None:
        with index.replied(settings) as answer:
            yield LedgerAnswer(answer.value, answer.line())
        return
    whole = read_answered(Connection.from_settings(settings), settings.ledger_topic)
    yield LedgerAnswer(whole, f"answered by reading the whole ledger topic ({reason})")


def settled_now(settings: Settings, keys: list[str]) -> Container[str]:
    """Which of ``keys`` the ledger holds settled now (from the index when one is built)."""
    from onceonly.operations import index

    if index.no_index_reason(settings) is None:
        return index.settled_keys(settings, keys)
    return read_answered(Connection.from_settings(settings), settings.ledger_topic).settled


def wait_for_answers(settings: Settings, summary: Summary, wait_s: float) -> int:
    """Poll the ledger until the worker has answered what was fed, or ``wait_s`` passes."""
    deadline = time.monotonic() + wait_s
    answered = 0
    while summary.fed:
        answered = summary.answered(settled_now(settings, summary.fed))
        if answered >= len(summary.fed) or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    return answered
