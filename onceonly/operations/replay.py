"""Replay a range of the deliveries topic, and retry dead letters, through the same pipeline.

The method is a copy, not a rewind: each record of the range is produced again, to the
same partition with the same key, carrying the ``onceonly-replay`` header. Workers keep
running; the group's offsets are never moved, so no live member has to stop. For a
replayed record, dedupe lets *failed* events through again (and only those: succeeded
events are skipped), and the reply ledger still stops anything already sent. A replay of
any size waits on the broker when its queue is full; one that stops returns the ranges
still to do, from the first record whose copy was not acknowledged.

A dead letter is closed only when all it held was acknowledged by the broker: its
envelopes go again only if their MACs verify (a letter planted on the unauthenticated
dead-letter topic is never signed and sent), and whatever is left open is reported with
the reason (:class:`RetryReport`).
"""

from __future__ import annotations

import json
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from onceonly.foundation.errors import OnceOnlyError
from onceonly.foundation.kafka import (
    Connection,
    KafkaAdapterError,
    TopicMissing,
    TopicRange,
    ranges,
    read,
    sync_producer,
)
from onceonly.foundation.kafka._producer import Copied, Headers, copy_ranges
from onceonly.foundation.kafka._reader import within
from onceonly.schemas import dead_letter
from onceonly.schemas.dead_letter import RECORD_CHECKS
from onceonly.schemas.envelope import MAC_HEADER, REPLAY_HEADER, TICK_HEADER


class ReplayError(OnceOnlyError):
    """A replay cannot be planned or run; the message says why and what to do."""


#: a partition's range to replay: the seam's TopicRange
PartitionPlan = TopicRange


def plan(
    connection: Connection,
    topic: str,
    *,
    from_offset: int | None = None,
    from_time: datetime | None = None,
    partition: int | None = None,
    resume: Sequence[TopicRange] = (),
) -> list[PartitionPlan]:
    """Per partition: from where (the offset, or the first record at or after the time) to
    the end; or, with ``resume``, the ranges a replay that stopped printed."""
    if sum(x is not None for x in (from_offset, from_time)) + bool(resume) != 1:
        raise ReplayError("give exactly one of --from-offset, --from-time and --resume")
    try:
        found = ranges(
            connection,
            topic,
            from_offset=0 if resume else from_offset,
            from_time=from_time,
            partition=partition,
        )
        return within(resume, found) if resume else found
    except TopicMissing as exc:
        raise ReplayError(f"{exc} (ONCEONLY_DELIVERIES_TOPIC, --partition, --resume)") from exc
    except KafkaAdapterError as exc:
        raise ReplayError(str(exc)) from exc


def records(connection: Connection, topic: str, plans: list[PartitionPlan]) -> Iterator[Any]:
    """The records of the planned ranges, partition by partition (confluent Messages)."""
    try:
        yield from read(connection, topic, plans)
    except KafkaAdapterError as exc:
        raise ReplayError(str(exc)) from exc


def _bulk(connection: Connection) -> Connection:
    """The connection of a bulk copy: 30 s for an acknowledgement, records up to 8 MB."""
    return replace(connection, produce_timeout_ms=30_000, record_max_bytes=8 << 20)


def _producer(connection: Connection) -> Any:
    return sync_producer(_bulk(connection))


#: the replay's producer, by name: a broker's quota can hold a replay back (client.id)
REPLAY_CLIENT_ID = "onceonly-replay"
#: what a replay did: the copies acknowledged and, if it stopped, why and what is left
Replayed = Copied


def replay(
    connection: Connection,
    topic: str,
    plans: list[PartitionPlan],
    *,
    advance: Callable[[int], None] = lambda n: None,
    stop: Callable[[], bool] = lambda: False,
) -> Replayed:
    """Produce the planned records again with the replay header (ticks are not copied),
    waiting on the broker whenever its queue is full; what is not known to be copied when
    it stops (a refusal, ``stop()``) is left for ``onceonly replay --resume``."""
    replay_id = uuid.uuid4().hex.encode()

    def headers(msg: Any) -> Headers | None:
        kept: Headers = [(k, v) for k, v in (msg.headers() or []) if k != REPLAY_HEADER]
        if any(k == TICK_HEADER for k, _ in kept):
            return None
        return [*kept, (REPLAY_HEADER, replay_id)]

    # what waits in memory for the broker: 20,000 records or 64 MB, whichever comes first
    memory: dict[str, Any] = {
        "queue.buffering.max.messages": 20_000,
        "queue.buffering.max.kbytes": 64 << 10,
    }
    return copy_ranges(
        replace(_bulk(connection), produce_linger_ms=20),
        topic,
        plans,
        headers=headers,
        advance=advance,
        stop=stop,
        **{**memory, "client.id": REPLAY_CLIENT_ID},
    )


# -- dead letters -------------------------------------------------------------------------
#
# A letter is closed (a ``retried`` note names it) only when every envelope it held was
# acknowledged by the broker; the rest stay open, each with the reason. What may be sent
# is decided in :mod:`onceonly.schemas.dead_letter` (MACs verified); this part reads and produces.

#: a record of the dead-letter topic that says which letters a retry sent again
RETRIED_KIND = dead_letter.RETRIED_KIND
#: how long a retry waits for the broker's acknowledgements
ACK_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class DeadLetter:
    offset: int
    letter: dict[str, Any]
    #: when ``dead-letters retry`` last sent it again (None: open)
    retried_at: str | None = None

    @property
    def event_ids(self) -> list[str]:
        """The ids of the events it holds, or of those left out for size."""
        entries = [self.letter.get(name) for name in ("envelopes", "envelopes_omitted")]
        found = [e for each in entries if isinstance(each, list) for e in each]
        return [str(e.get("event_id", "")) for e in found if isinstance(e, dict)]

    @property
    def open(self) -> bool:
        return self.retried_at is None


def letters_with_outcomes(records: list[tuple[int, dict[str, Any]]]) -> list[DeadLetter]:
    """The letters among a dead-letter topic's records, each with its latest retry (pure)."""
    retried: dict[int, str] = {}
    for _, value in records:
        if value.get("kind") == RETRIED_KIND:
            for offset in dead_letter.noted_letters(value):
                retried[offset] = str(value.get("at", ""))
    return [
        DeadLetter(offset, value, retried.get(offset))
        for offset, value in records
        if value.get("kind") != RETRIED_KIND
    ]


def dead_letters(connection: Connection, topic: str) -> list[DeadLetter]:
    """Every letter of the dead-letter topic, with its latest retry."""
    wanted = plan(connection, topic, from_offset=0)
    found = records(connection, topic, wanted)
    parsed = [(int(msg.offset()), dead_letter.parse_record(msg.value())) for msg in found]
    return letters_with_outcomes(parsed)


def missing_secret(
    letters: Sequence[DeadLetter], chosen: Sequence[DeadLetter], mac_key: bytes | None
) -> str | None:
    """Why a retry without ONCEONLY_ENVELOPE_SECRET must not run, or None (pure): a chosen
    letter carries MACs, or the newest letter says the worker checks them. Its copies
    would carry no MAC, the worker would dead-letter them again, and nothing would be sent."""
    if mac_key is not None:
        return None
    newest = max(letters, key=lambda x: x.offset, default=None)
    found = [x for x in chosen if dead_letter.carries_macs(x.letter)]
    if not found and newest is not None and dead_letter.carries_macs(newest.letter):
        found = [newest]
    if not found:
        return None
    return (
        f"the worker checks envelope MACs (dead letter {found[0].offset} says so): set "
        f"{dead_letter.SECRET} to the worker's secret for this retry; without it every copy "
        "would be dead-lettered again as bad_mac"
    )


@dataclass(frozen=True, slots=True)
class RetryReport:
    """What a retry did: the letters it closed, and those it left open with the reason."""

    sent: tuple[int, ...] = ()  #: letters closed: all they held was acknowledged
    events: int = 0  #: events of those letters
    held: tuple[tuple[int, str], ...] = ()  #: letters with nothing it may send, and why
    failed: tuple[tuple[int, str], ...] = ()  #: letters the broker did not take, and why

    @property
    def left_open(self) -> list[tuple[int, str]]:
        return [*self.held, *self.failed]


Plan = list[dead_letter.Resend] | str


def settle(
    plans: Sequence[tuple[DeadLetter, Plan]],
    acked: Mapping[int, int],
    errors: Mapping[int, Sequence[str]],
) -> RetryReport:
    """Which letters are closed (every event acknowledged) and which stay open (pure)."""
    sent: list[int] = []
    events = 0
    held: list[tuple[int, str]] = []
    failed: list[tuple[int, str]] = []
    for letter, planned in plans:
        if isinstance(planned, str):
            held.append((letter.offset, planned.replace("<id>", str(letter.offset))))
            continue
        done, wanted = acked.get(letter.offset, 0), len(planned)
        if done == wanted and not errors.get(letter.offset):
            sent.append(letter.offset)
            events += wanted
            continue
        why = "; ".join(errors.get(letter.offset, ())) or (
            f"{wanted - done} event(s) not acknowledged within {ACK_TIMEOUT_S:g} s"
        )
        failed.append(
            (
                letter.offset,
                f"not sent: {why}. {done} of its {wanted} event(s) reached the broker; "
                "run the retry again once the broker takes them (repeats are harmless)",
            )
        )
    return RetryReport(tuple(sent), events, tuple(held), tuple(failed))


def _send(
    connection: Connection,
    deliveries_topic: str,
    plans: Sequence[tuple[DeadLetter, Plan]],
    *,
    dead_letter_topic: str | None,
) -> RetryReport:
    """Produce what the plans allow, as a replay; note the letters that were acknowledged."""
    producer = _producer(connection)
    replay_id = uuid.uuid4().hex.encode()
    acked: Counter[int] = Counter()
    errors: dict[int, list[str]] = defaultdict(list)

    def delivered(letter: int, event_id: str) -> Callable[[Any, Any], None]:
        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                acked[letter] += 1
            else:
                errors[letter].append(f"the broker refused event {event_id}: {err}")

        return on_delivery

    for letter, planned in plans:
        for resend in planned if not isinstance(planned, str) else ():
            event_id = resend.envelope.event_id
            try:
                producer.produce(
                    deliveries_topic,
                    resend.value,
                    key=resend.envelope.thread_key.encode(),
                    headers=[*resend.headers(), (REPLAY_HEADER, replay_id)],
                    on_delivery=delivered(letter.offset, event_id),
                )
            except Exception as exc:  # confluent's BufferError or KafkaException: not queued
                errors[letter.offset].append(f"event {event_id} was not produced: {exc}")
            producer.poll(0)
    producer.flush(ACK_TIMEOUT_S)
    report = settle(plans, acked, errors)
    if dead_letter_topic is not None and report.sent:
        _note(producer, dead_letter_topic, report, replay_id)
    return report


def _note(producer: Any, topic: str, report: RetryReport, replay_id: bytes) -> None:
    note = {
        "v": dead_letter.LETTER_VERSION,
        "kind": RETRIED_KIND,
        "letters": list(report.sent),
        "replay_id": replay_id.decode(),
        "at": datetime.now(UTC).isoformat(),
    }
    refused: list[str] = []
    producer.produce(
        topic,
        json.dumps(note).encode(),
        on_delivery=lambda err, msg: refused.append(str(err)) if err is not None else None,
    )
    if producer.flush(ACK_TIMEOUT_S) or refused:
        raise ReplayError(
            f"dead letters {list(report.sent)} were sent again but could not be marked "
            f"retried on {topic} ({refused[:1] or 'not acknowledged'}); they stay open, "
            "and a later retry sends them again: harmless, the reply ledger stops a second reply"
        )


def retry_dead_letters(
    connection: Connection,
    deliveries_topic: str,
    letters: Sequence[DeadLetter],
    *,
    dead_letter_topic: str | None = None,
    mac_key: bytes | None = None,
) -> RetryReport:
    """Send the dead letters' envelopes through the pipeline again, as a replay: with
    ``mac_key`` only those whose MAC verifies; then note on the dead-letter topic which
    letters were acknowledged, so a later retry of all takes only the open ones."""
    plans = [(x, dead_letter.resendable(x.letter, mac_key)) for x in letters]
    return _send(connection, deliveries_topic, plans, dead_letter_topic=dead_letter_topic)


def original_record(
    connection: Connection, topic: str, letter: DeadLetter
) -> dead_letter.Original | None:
    """The deliveries record a ``bad_mac`` (or ``not_an_envelope``) letter names, if the
    topic still holds it."""
    partition, offset = letter.letter.get("partition"), letter.letter.get("offset")
    if not isinstance(partition, int) or not isinstance(offset, int):
        return None
    try:
        [step] = ranges(connection, topic, from_offset=offset, partition=partition)
    except TopicMissing:
        return None
    except KafkaAdapterError as exc:
        raise ReplayError(str(exc)) from exc
    if not step.start == offset < step.end:
        return None
    for msg in records(connection, topic, [TopicRange(partition, offset, offset + 1)]):
        macs = [v for k, v in msg.headers() or () if k == MAC_HEADER]
        return dead_letter.Original(msg.value(), macs[0] if len(macs) == 1 else None)
    return None


def readmit_dead_letters(
    connection: Connection,
    deliveries_topic: str,
    letters: Sequence[DeadLetter],
    *,
    current: bytes,
    previous: bytes | None = None,
    vouch: bool = False,
    dead_letter_topic: str | None = None,
) -> RetryReport:
    """Send again, signed with the ``current`` secret, what letters written before it was
    set or rotated hold: what verifies under ``previous`` (or ``current``), or, with
    ``vouch``, whatever they hold (see :func:`onceonly.schemas.dead_letter.readmittable`)."""
    plans: list[tuple[DeadLetter, Plan]] = []
    for letter in letters:
        has_record = letter.letter.get("check") in RECORD_CHECKS
        found = original_record(connection, deliveries_topic, letter) if has_record else None
        readmit = dead_letter.readmittable(
            letter.letter,
            found,
            current=current,
            previous=previous,
            vouch=vouch,
        )
        plans.append((letter, readmit))
    return _send(connection, deliveries_topic, plans, dead_letter_topic=dead_letter_topic)
