"""A burst's read of its thread, with approval on: the drafts its new reply supersedes.

A burst with a new message reads the thread (the mail API's listing: one read) for the
drafts still awaiting a decision, which its reply supersedes and recalls; a burst
delivered again reads it for a draft marked superseded whose newer reply never saw it
(the simulator's finding F32). When the thread cannot be read, the burst is answered
alone unless the worker's ledger holds a draft its reply would have to recall (one of the
thread still waiting, before a new message; one marked superseded by the burst): only the
thread holds the draft's messages, so the burst fails
(:class:`~onceonly.processors.exceptions.ThreadUnread`), is tried again and then
dead-lettered; the letter's retry recalls them (the simulator's finding F43).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from onceonly.processors.approval.decisions import (
    answered_apart,
    unseen_marks,
    waits_unapproved,
)
from onceonly.processors.exceptions import ThreadUnread
from onceonly.processors.messages import Inbound, ThreadMessage, reply_key
from onceonly.processors.reply.bursts import burst_order, chain_end
from onceonly.processors.reply.parts import ReplyParts
from onceonly.schemas.codec import dumps_compact
from onceonly.schemas.ledger import ReplyRecord

if TYPE_CHECKING:
    from onceonly.processors.mail.protocol import MailProvider
    from onceonly.processors.parts import WorkerParts

log = structlog.get_logger("onceonly.approvals")


@dataclass(frozen=True, slots=True)
class ThreadRead:
    """What a burst's read of its thread found (:func:`read_thread`)."""

    target: Inbound  #: the message whose new reply supersedes the waiting drafts
    before: dict[str, ThreadMessage]  #: the thread's messages before it, by reply key
    read: dict[str, ThreadMessage]  #: every message read, by reply key
    fresh: list[Inbound]  #: the messages written: no record, or a draft written again
    redo: bool = False  #: the latest message's draft is written again (F32)


async def read_thread(
    parts: WorkerParts, burst: Sequence[Inbound], fresh: list[Inbound], reply: ReplyParts
) -> ThreadRead | None:
    """The thread as the burst's reply needs it; None when it cannot be read and the ledger
    holds no draft the reply would have to recall (:func:`unread`, which raises otherwise:
    the burst is answered alone).

    Read before the burst's latest message, for the marks on every draft before it (F32's,
    including one after a new message older than that latest); and before the newest new
    message too, when it is not the latest, for the drafts its new reply supersedes."""
    ledger, channel = parts.ledger, parts.channels[reply.channel]
    latest = max(burst, key=burst_order)
    # a burst delivered again whose latest message's draft never saw a message marked
    # superseded by it (F32), or covers one its own reply answered apart: that draft is
    # written again (with the one, without the other; the other needs no thread read,
    # and a decision approving the draft is refused meanwhile: decisions.ANSWERED_APART)
    redo = latest not in fresh and waits_unapproved(draft := ledger.get(latest.key))
    apart = redo and answered_apart(ledger.get, draft)
    if (read := await earlier(channel, latest)) is None:
        unread(parts, burst, fresh, latest)  # raises when a draft needs the thread
        return ThreadRead(latest, {}, {}, [*fresh, latest], redo=True) if apart else None
    if redo:
        unseen = unseen_marks(ledger.get, [*read, *(m.key for m in burst)])
        if any(end.key == latest.key for _, end in unseen) or apart:
            return ThreadRead(latest, read, read, [*fresh, latest], redo=True)
    # the newest message with no record: the new reply's, what a draft is superseded by.
    # A message of the burst with a record (delivered again: a catch-up's or a replay's
    # event) has its reply already, and never marks or recalls a draft (simulator F20)
    target = max(fresh, key=burst_order) if fresh else latest
    if target is latest:
        return ThreadRead(target, read, read, fresh)
    if (before := await earlier(channel, target)) is None:
        unread(parts, burst, fresh, target)
        return None
    return ThreadRead(target, before, read, fresh)


async def earlier(channel: MailProvider, target: Inbound) -> dict[str, ThreadMessage] | None:
    """The thread's messages before ``target`` (not the agent's own) by their reply keys;
    None when the thread cannot be read."""
    try:
        found = await channel.history(target)
    except Exception as exc:
        log.warning("thread not read", error=repr(exc), message_id=target.message_id)
        return None
    return {reply_key(target.inbox_id, m.message_id): m for m in found if not m.own}


def unread(
    parts: WorkerParts, burst: Sequence[Inbound], fresh: Sequence[Inbound], target: Inbound
) -> None:
    """A burst whose thread could not be read: answered alone (it returns) when the ledger
    holds no draft its reply would have to recall: none marked superseded by one of its
    messages and unseen (:func:`needing_thread`) and, with a new message, none of the thread
    before it waiting (a worker that lost the partition may have marked it superseded by
    that message, a mark landing late). Else :class:`ThreadUnread` (the simulator's finding
    F43: a reply written without them leaves them covered by a reply whose writer never
    saw them); the burst's dead letter holds them through the marks, which its retry
    finds in the thread."""
    get, keys = parts.ledger.get, {m.key for m in burst}
    thread = of_thread(parts.ledger.table.values(), target.thread_key)
    marks = [r for r in thread if isinstance(chain_end(get, get(r.key), keys), str)]
    owed = needing_thread(get, marks, {m.key for m in fresh})
    if fresh:  # the drafts before the new reply's message, which it would supersede
        owed += [r for r in thread if waits_unapproved(get(r.key)) and before(r, target)]
    if not owed:
        log.warning("thread not read; no draft of it waits", newer=target.key)
        return
    raise ThreadUnread(
        f"the thread of {target.key} could not be read, and its drafts "
        f"{sorted(r.key for r in owed)} wait or are marked superseded by this burst: its "
        "reply must see their messages, which only the thread holds; the burst is tried "
        "again, then dead-lettered (retry the dead letter once the mail API answers: its "
        "reply recalls them)"
    )


def before(record: ReplyRecord, target: Inbound) -> bool:
    """Whether ``record``'s message is an earlier one of the thread than ``target`` (its
    time, where the record has it): one of the burst's own, delivered again with its draft
    waiting, too (the new reply supersedes it; the simulator's finding F46)."""
    if record.key == target.key:
        return False
    return record.message_at is None or record.message_at <= target.occurred_at


def of_thread(values: Iterable[bytes], thread_key: str) -> list[ReplyRecord]:
    """The records of the ledger (``values``, the store's) of the thread ``thread_key``: a
    pass over the store on the path where the thread cannot be read, as the drafts' sweep
    reads it; only those records are decoded."""
    needle = b'"thread_key":' + dumps_compact(thread_key)
    return [ReplyRecord.decode(raw) for raw in values if needle in raw]


def needing_thread(
    get: Callable[[str], ReplyRecord | None],
    marks: Sequence[ReplyRecord],
    fresh: Collection[str],
) -> list[ReplyRecord]:
    """The marked drafts among ``marks`` (covered, through their chain, by a message of the
    burst) that its reply must recall: one whose chain reaches a message written now (a
    new one, or one a replay writes again), or whose newer reply never saw it (F32's,
    :func:`unseen_marks`)."""
    drafts = [r for r in marks if r.reply_text is not None and r.approval is None]
    unseen = {m.key for m, _ in unseen_marks(get, [r.key for r in drafts])}
    return [r for r in drafts if r.key in unseen or isinstance(chain_end(get, r, fresh), str)]
