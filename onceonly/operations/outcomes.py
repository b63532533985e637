"""What became of deliveries posted to ingest: refused, a duplicate, answered, declined...

``python -m devstack send`` posts deliveries, reads what the worker writes about them until
:func:`outcomes_known`, then reports each one from the records: ingest's answer, the dedupe
verdict (a later delivery of an event id already accepted is a duplicate: the worker skips
it), and the reply ledger for the message.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from onceonly.schemas.ledger import ReplyRecord, ReplyState

#: ledger states after which nothing more will happen without an operator
SETTLED = frozenset({ReplyState.SENT, ReplyState.COVERED, ReplyState.DECLINED, ReplyState.FAILED})


@dataclass(frozen=True, slots=True)
class Sent:
    """One posted delivery, as the report needs it."""

    label: str
    status: int  #: ingest's HTTP status; 0 when there was no answer
    detail: str
    event_id: str
    message_id: str | None


@dataclass(frozen=True, slots=True)
class Outcome:
    label: str
    verdict: str  #: one line: what happened to this delivery
    reply_text: str | None = None


def accepted(status: int) -> bool:
    return 200 <= status < 300


def by_message(ledger: Mapping[str, ReplyRecord]) -> dict[str, ReplyRecord]:
    """The ledger (keyed by reply key) indexed by the answered message's id."""
    return {record.message_id: record for record in ledger.values()}


def _reply_verdict(
    record: ReplyRecord | None, dry_run: bool, labels: Mapping[str, str]
) -> tuple[str, str | None]:
    if record is None:
        return "delivered; no reply recorded yet", None
    where = " in the dry-run outbox" if dry_run else ""
    if record.state is ReplyState.SENT:
        return f"answered{where} ({record.sent_message_id})", record.reply_text
    if record.state is ReplyState.COVERED:
        covering = labels.get(record.covered_by or "", f"the newer message {record.covered_by}")
        return f"answered by the reply to {covering}", None
    if record.state is ReplyState.DECLINED:
        return f"not answered: the writer declined ({record.reason or 'no reason'})", None
    if record.state is ReplyState.FAILED:
        return f"not answered: failed and dead-lettered ({record.error})", None
    if record.state is ReplyState.AWAITING:
        return f"drafted; awaiting approval ({record.reason})", record.reply_text
    return "reply recorded, send in progress", record.reply_text


def outcomes(
    sent: Sequence[Sent],
    replies: Mapping[str, ReplyRecord],
    *,
    dry_run: bool,
    seen: Mapping[str, Sequence[str]] | None = None,
) -> list[Outcome]:
    """One outcome per delivery, in the order they were posted; ``seen`` (event id to what
    the worker recorded of each of its deliveries, in topic order: :func:`worker_verdicts`)
    adds the worker's own word to each accepted delivery."""
    told = _outcomes(sent, replies, dry_run=dry_run)
    if seen is None:
        return told
    with_worker = _with_worker_verdicts(sent, seen)
    return [with_worker(n, o) for n, o in enumerate(told)]


def _with_worker_verdicts(
    sent: Sequence[Sent], seen: Mapping[str, Sequence[str]]
) -> Callable[[int, Outcome], Outcome]:
    """The i-th accepted delivery of an event is the i-th of its records in the topic: one
    sender posting in turn, one key, one partition, so the topic keeps the order."""
    index: dict[int, tuple[str, int]] = {}
    counts: dict[str, int] = {}
    for n, item in enumerate(sent):
        if accepted(item.status):
            index[n] = (item.event_id, counts.get(item.event_id, 0))
            counts[item.event_id] = index[n][1] + 1

    def add(n: int, outcome: Outcome) -> Outcome:
        if n not in index:
            return outcome
        event, i = index[n]
        words = seen.get(event, ())
        said = words[i] if i < len(words) else "no record of it yet"
        return Outcome(outcome.label, f"{outcome.verdict} [worker: {said}]", outcome.reply_text)

    return add


def worker_verdicts(
    deliveries: Mapping[str, Sequence[tuple[int, int, str]]],
) -> dict[str, list[str]]:
    """Event id to its deliveries' outcomes in topic order, from (partition, offset, outcome)."""
    return {event: [o for _, _, o in sorted(found)] for event, found in deliveries.items()}


def _outcomes(
    sent: Sequence[Sent], replies: Mapping[str, ReplyRecord], *, dry_run: bool
) -> list[Outcome]:
    first_of: dict[str, str] = {}
    label_of_message = {item.message_id: item.label for item in reversed(sent) if item.message_id}
    #: reply key -> the label of the delivery whose message it answers
    labels = {r.key: label_of_message[m] for m, r in replies.items() if m in label_of_message}
    out: list[Outcome] = []
    for item in sent:
        if not accepted(item.status):
            answer = f"HTTP {item.status}" if item.status else "no answer"
            out.append(Outcome(item.label, f"refused by ingest: {answer} {item.detail}".strip()))
            continue
        if item.event_id in first_of:
            out.append(
                Outcome(
                    item.label,
                    f"skipped as a duplicate of {first_of[item.event_id]} (event {item.event_id})",
                )
            )
            continue
        first_of[item.event_id] = item.label
        if item.message_id is None:
            out.append(Outcome(item.label, f"delivered (event {item.event_id}); not a message"))
            continue
        verdict, text = _reply_verdict(replies.get(item.message_id), dry_run, labels)
        out.append(Outcome(item.label, verdict, text))
    return out


def waiting_for(sent: Sequence[Sent], replies: Mapping[str, ReplyRecord]) -> set[str]:
    """The accepted messages whose ledger record has not settled yet."""
    return {
        item.message_id
        for item in sent
        if accepted(item.status)
        and item.message_id is not None
        and (item.message_id not in replies or replies[item.message_id].state not in SETTLED)
    }


#: what the worker's record of a delivery says while it is not done with it (the words of
#: :attr:`onceonly.operations.trace.model.DeliveryTrace.outcome`)
UNDECIDED = "not processed yet"
UNFINISHED = frozenset({UNDECIDED, "in progress"})


def outcomes_known(
    sent: Sequence[Sent], replies: Mapping[str, ReplyRecord], seen: Mapping[str, Sequence[str]]
) -> bool:
    """Whether every accepted delivery's outcome is known: the ledger record of each of its
    messages has settled, and the worker's final word on each delivery is recorded
    (``seen``: event id to the words on its deliveries, :func:`worker_verdicts`)."""
    if waiting_for(sent, replies):
        return False
    want = Counter(item.event_id for item in sent if accepted(item.status))
    return all(
        len(words := seen.get(event, ())) >= n and not UNFINISHED.intersection(words)
        for event, n in want.items()
    )
