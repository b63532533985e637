"""What a trace says about one message, event or reply key: frozen, typed, no Kafka in it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from onceonly.schemas.decision import DecisionRecord
from onceonly.schemas.ledger import ReplyRecord, ReplyState

#: one skip of the worker, as the decisions topic has it (``recent_skips`` returns these)
Skip = DecisionRecord


@dataclass(frozen=True, slots=True)
class Record:
    """One record of a topic, as the assembly reads it (built from Kafka, or by a test)."""

    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()

    def header(self, name: str) -> bytes | None:
        return next((v for k, v in self.headers if k == name), None)


@dataclass(frozen=True, slots=True)
class DeliveryTrace:
    """One delivery record of the deliveries topic and what the worker did with it."""

    partition: int
    offset: int
    at: datetime  #: when the record was written to the topic
    provider: str
    event_id: str
    event_type: str
    message_id: str | None
    thread_key: str
    received_at: datetime  #: when ingest (or catch-up, or a retry) received it
    replay: bool  #: written by ``onceonly replay`` or ``dead-letters retry``
    #: ``accepted`` (it claimed its event), ``duplicate``, ``in_progress``, ``failed``
    #: (skipped by dedupe or as a repeat held already), ``unseen`` (no worker decided yet)
    verdict: str
    verdict_stage: str | None  #: ``dedupe`` or ``hold`` for a skip; None when accepted
    held_at: datetime | None  #: when its thread's buffer took it (None: not held)
    released_at: datetime | None  #: when the worker took it up: its claim, or its skip
    finished: str | None  #: ``succeeded`` or ``failed``, for an accepted delivery
    finished_at: datetime | None
    #: what happened after dedupe: own mail, already answered, declined, no handler
    skips: tuple[Skip, ...] = ()
    #: the OpenTelemetry trace id in its ``traceparent`` header (None: traced nowhere)
    trace_id: str | None = None

    @property
    def outcome(self) -> str:
        """One word or two for a person (and ``python -m devstack send``)."""
        if self.verdict == "unseen":
            return "not processed yet"
        if self.verdict != "accepted":
            return f"skipped: {self.verdict}"
        if self.skips:
            return f"skipped: {self.skips[-1].reason}"
        if self.finished == "failed":
            return "dead-lettered"
        if self.finished == "succeeded":
            return "processed"
        return "in progress"


@dataclass(frozen=True, slots=True)
class LedgerChange:
    """One write of a reply's ledger record, oldest first."""

    state: ReplyState
    at: datetime  #: when it was written to the ledger topic
    attempts: int
    error: str | None


@dataclass(frozen=True, slots=True)
class LedgerTrace:
    """A reply's ledger record (its latest write), how it got there, and what covers it."""

    record: ReplyRecord
    history: tuple[LedgerChange, ...]
    #: the record of the reply that answered this message, when it is *covered*
    covering: ReplyRecord | None = None
    #: when the ledger's retention tombstoned the record after its last write (its history
    #: is then what the index kept); None while the ledger still holds it
    removed_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class DeadLetterTrace:
    """A dead letter that names the message, one of its events, its key or its records."""

    id: int  #: its offset: the id ``dead-letters retry`` takes
    at: str
    check: str
    reason: str
    key: str | None
    attempts: int | None
    last_error: str | None
    event_ids: tuple[str, ...]
    retried_at: str | None  #: when ``dead-letters retry`` sent it again (None: open)


@dataclass(frozen=True, slots=True)
class Trace:
    """Everything the topics say about one id."""

    ident: str
    #: what the id turned out to be: ``message_id``, ``event_id`` or ``reply_key``
    matched: str
    message_ids: tuple[str, ...]
    deliveries: tuple[DeliveryTrace, ...]
    ledger: tuple[LedgerTrace, ...]
    dead_letters: tuple[DeadLetterTrace, ...]

    @property
    def trace_ids(self) -> tuple[str, ...]:
        """The OpenTelemetry trace ids of its deliveries, each once, oldest first."""
        return tuple(dict.fromkeys(d.trace_id for d in self.deliveries if d.trace_id))

    @property
    def reply(self) -> ReplyRecord | None:
        """The ledger record that answers the message (the covering one for a burst)."""
        for entry in self.ledger:
            if entry.covering is not None:
                return entry.covering
            return entry.record
        return None

    @property
    def reply_text(self) -> str | None:
        record = self.reply
        return record.reply_text if record is not None else None

    @property
    def answered(self) -> bool:
        record = self.reply
        return record is not None and record.state is ReplyState.SENT

    @property
    def outcome(self) -> str:
        """The message's (or event's) fate in a few words."""
        if self.ledger:
            record = self.ledger[0].record
            state = record.state
            if state is ReplyState.COVERED:
                return f"answered by the reply to a later message ({record.covered_by})"
            if state is ReplyState.SENT:
                return "answered"
            if state is ReplyState.DECLINED and record.approval is not None:
                return f"declined: {record.reason}"
            if state is ReplyState.DECLINED:
                return f"declined by the writer: {record.reason or 'no reason given'}"
            if state is ReplyState.AWAITING:
                return f"awaiting approval: a draft ({record.reason or 'no reason given'})"
            if state is ReplyState.FAILED:
                return "dead-lettered" + (" and retried" if self._retried else "")
            return "pending: the reply is recorded, its send is not confirmed yet"
        accepted = [d for d in self.deliveries if d.verdict == "accepted"]
        if self.dead_letters:
            return "dead-lettered" + (" and retried" if self._retried else "")
        if accepted:
            return accepted[-1].outcome
        return self.deliveries[-1].outcome if self.deliveries else "unknown"

    @property
    def _retried(self) -> bool:
        return any(letter.retried_at for letter in self.dead_letters)
