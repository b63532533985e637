"""Catch-up: list what arrived while webhooks were not, and feed it through.

AgentMail disables an endpoint after ~5 days of failures and never redelivers what it
missed; its own catch-up path is to list messages after a time, and Nylas's too. Each
message the mail provider lists (``MailClient.messages_since``) that is not the agent's
own becomes an envelope, as if its webhook had come
(:meth:`~onceonly.processors.mail.protocol.MailProvider.missed`, then ingest's own
normaliser), with a deterministic event id, keyed by its thread. The reply ledger (keyed
by account and message id) skips those already answered. Without a start it lists a week
back, or further to the account's last message recorded before then (:func:`window_for`),
so mail answered since an outage never hides the mail the outage lost. The providers and
their API clients come from :mod:`onceonly.processors.mail.registry`.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from onceonly.foundation.errors import ConfigError
from onceonly.foundation.kafka import Connection
from onceonly.foundation.settings import Settings
from onceonly.ingest import normalise
from onceonly.processors.mail.protocol import MailProvider, Missed
from onceonly.processors.mail.registry import catch_up_provider
from onceonly.schemas.envelope import Envelope
from onceonly.schemas.ledger import ReplyRecord, ReplyState


def envelope_for(provider: str, missed: Missed, received_at: datetime) -> Envelope:
    """The envelope ingest would have made from the webhook ``missed`` stands for."""
    webhook = json.dumps(missed.webhook, default=str)
    return normalise.for_route(provider)(webhook, {}, received_at)


def last_answered(
    ledger: Mapping[str, ReplyRecord], inbox_id: str, *, before: datetime | None = None
) -> datetime | None:
    """The latest time of a message of the inbox the ledger recorded (at or ``before`` a
    time): its own time, not when its reply was written, since a reply written late must
    not move a start past mail whose webhooks were lost. Records from before the ledger
    kept message times count when they were written."""
    times = [r.message_at or r.created_at for r in ledger.values() if r.inbox_id == inbox_id]
    return max((t for t in times if before is None or t <= before), default=None)


#: how far back a catch-up without --since lists at least. An outage that ended within it
#: is listed whole, however long it lasted: AgentMail retries an event for ~28 h and
#: disables the endpoint after ~5 days of failures, so the outage behind a disabled
#: webhook began about 5 days before; a week also matches the deliveries topic's retention
LOOK_BACK = timedelta(days=7)


@dataclass(frozen=True, slots=True)
class Window:
    """Where a catch-up lists from, and why there."""

    start: datetime
    why: str


def window_for(
    ledger: Mapping[str, ReplyRecord],
    account: str,
    now: datetime,
    *,
    since: datetime | None = None,
    look_back: timedelta = LOOK_BACK,
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
    if last_answered(ledger, account) is None:
        return None
    horizon = now - look_back
    back = f"{look_back.total_seconds() / 86400:g} days back"
    anchor = last_answered(ledger, account, before=horizon)
    if anchor is None:
        return Window(horizon, f"{back}; the ledger records no earlier message of it")
    why = f"its last message the ledger recorded before {back}: an outage that ended since"
    return Window(anchor, why + " is listed whole")


def window_line(label: str, window: Window, now: datetime) -> str:
    """What a catch-up says it listed (pure)."""
    start, end = (t.isoformat(timespec="seconds") for t in (window.start, now))
    return f"listed {label} from {start} to {end} ({window.why})"


#: a reply in one of these states is final: catch-up neither counts it fed nor waits for it
#: (*declined*: the writer or a person said no; no email will come)
SETTLED = frozenset({ReplyState.SENT, ReplyState.COVERED, ReplyState.DECLINED})


@dataclass
class Summary:
    found: int = 0
    fed: list[str] = field(default_factory=list)  #: reply keys fed to the pipeline
    skipped_sent_by_agent: int = 0
    skipped_answered: int = 0

    async def feed(
        self,
        key: str,
        envelope: Envelope,
        *,
        ledger: Mapping[str, ReplyRecord],
        feed: Callable[[Envelope], Any],
    ) -> None:
        """Feed one answerable message, counted as already answered or as fed."""
        record = ledger.get(key)
        if record is not None and record.state in SETTLED:
            self.skipped_answered += 1  # fed all the same: the ledger skips it
        else:
            self.fed.append(key)
        result = feed(envelope)
        if hasattr(result, "__await__"):
            await result

    def answered(self, ledger: Mapping[str, ReplyRecord]) -> int:
        return sum(1 for key in self.fed if key in ledger and ledger[key].state in SETTLED)


async def catch_up(
    provider: MailProvider,
    account: str,
    since: datetime,
    *,
    ledger: Mapping[str, ReplyRecord],
    feed: Callable[[Envelope], Any],
    progress: Callable[[], None] = lambda: None,
) -> Summary:
    """Feed each unanswered message ``provider`` lists for ``account`` after ``since`` through
    the pipeline, oldest first; the account's own mail is counted as sent by the agent."""
    from onceonly.processors.messages import reply_key

    listed: list[Missed] = []
    summary = Summary()
    async for message in provider.sender.messages_since(account, since):
        summary.found += 1
        progress()
        missed = await provider.missed(account, message)
        if missed is None:
            summary.skipped_sent_by_agent += 1
        else:
            listed.append(missed)
    now = datetime.now(UTC)
    for missed in sorted(listed, key=lambda m: (m.at, m.message_id)):
        key = reply_key(account, missed.message_id)
        envelope = envelope_for(provider.name, missed, now)
        await summary.feed(key, envelope, ledger=ledger, feed=feed)
    return summary


def read_ledger(connection: Connection, topic: str) -> dict[str, ReplyRecord]:
    """The compacted reply ledger as a dict (the latest record per key; effects left out)."""
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


# -- what ``onceonly catch-up`` runs -------------------------------------------------

Lister = Callable[..., Awaitable["Summary"]]


def lister_for(
    settings: Settings, inbox_id: str | None, nylas_grant: str | None
) -> tuple[str, str, Lister]:
    """(account, label, lister) for an AgentMail inbox or a Nylas grant, over the provider
    the registry builds; ConfigError if the provider's API key is missing."""
    if nylas_grant is not None:
        name, account, label = "nylas", nylas_grant, f"grant {nylas_grant}"
    elif inbox_id is not None:
        name, account, label = "agentmail", inbox_id, inbox_id
    else:
        raise ConfigError("name an AgentMail inbox (--inbox) or a Nylas grant (--nylas-grant)")
    provider = catch_up_provider(settings, name)
    return account, label, functools.partial(catch_up, provider, account)


async def feed_unanswered(
    settings: Settings,
    lister: Lister,
    start: datetime,
    ledger: Mapping[str, ReplyRecord],
    *,
    progress: Callable[[], None] = lambda: None,
) -> Summary:
    """List the account's mail after ``start`` and feed the unanswered through the pipeline."""
    from onceonly.foundation.kafka import AsyncProducer

    producer = AsyncProducer(Connection.from_settings(settings))

    mac_key = settings.envelope_mac_key

    async def feed(envelope: Envelope) -> None:
        value = envelope.encode()
        await producer.produce(
            settings.deliveries_topic,
            value,
            key=envelope.thread_key.encode(),
            headers=envelope.headers(mac_key, value),
        )

    try:
        return await lister(start, ledger=ledger, feed=feed, progress=progress)
    finally:
        producer.close()


def wait_for_answers(settings: Settings, summary: Summary, wait_s: float) -> int:
    """Poll the ledger until the worker has answered what was fed, or ``wait_s`` passes."""
    deadline = time.monotonic() + wait_s
    answered = 0
    while summary.fed:
        current = read_ledger(Connection.from_settings(settings), settings.ledger_topic)
        answered = summary.answered(current)
        if answered >= len(summary.fed) or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    return answered
