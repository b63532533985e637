"""Records of the compacted reply ledger and of the dedupe table, versioned like the envelope."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from onceonly.schemas.approval import Approval
from onceonly.schemas.codec import dumps_compact, loads
from onceonly.schemas.exceptions import SchemaError

#: 4 added the *awaiting* state and ``approval`` (who decided on a draft, when, what);
#: 2 added ``reason`` (why a reply was declined) and ``message_at`` (the answered
#: message's own time); 4 also added ``usage`` (what the writer's calls cost); older
#: versions still decode; 5 added ``written_at`` (when the record itself was made)
LEDGER_VERSION = 5
KNOWN_LEDGER_VERSIONS = frozenset({1, 2, 3, 4, 5})


class ReplyState(StrEnum):
    PENDING = "pending"  #: text and key recorded; the send may or may not have happened
    SENT = "sent"  #: the provider confirmed the send (sent_message_id)
    COVERED = "covered"  #: answered by the reply to a later message of the same burst
    FAILED = "failed"  #: dead-lettered; retried only by an explicit replay
    DECLINED = "declined"  #: the writer chose not to answer; never asked again
    #: a draft (text, reason, key) a person approves, edits or rejects before it is sent
    AWAITING = "awaiting"


@dataclass(frozen=True, slots=True)
class Usage:
    """What a reply's writer calls cost, as the writer reported it (version 4)."""

    model: str
    """The model named by the writer (``a+b`` when a reply's calls named two)."""
    input_tokens: int = 0
    """Prompt tokens, summed over the reply's calls."""
    output_tokens: int = 0
    """Completion tokens, summed over the reply's calls."""

    @property
    def total(self) -> int:
        """Input and output tokens together."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        model = self.model if self.model == other.model else f"{self.model}+{other.model}"
        return Usage(
            model, self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens
        )

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "input": self.input_tokens, "output": self.output_tokens}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Usage:
        return cls(str(data["model"]), int(data["input"]), int(data["output"]))


@dataclass(frozen=True, slots=True)
class ReplyRecord:
    """One reply the agent owes or has sent, keyed by its idempotency key."""

    key: str
    inbox_id: str
    message_id: str
    thread_key: str
    state: ReplyState
    created_at: datetime
    reply_text: str | None = None
    sent_message_id: str | None = None
    covered_by: str | None = None
    attempts: int = 0
    error: str | None = None
    channel: str = "agentmail"
    reason: str | None = None
    #: the answered message's own time (its payload's), where catch-up starts from
    message_at: datetime | None = None
    #: the keys of the burst's other messages, which the writer saw and this reply covers
    #: (version 3; None: written before, when a reply covered whatever came with it)
    covers: tuple[str, ...] | None = None
    #: the writer's reported usage for this reply (version 4; None: not reported)
    usage: Usage | None = None
    #: the decision applied to a draft (version 4; None: no person decided on it)
    approval: Approval | None = None
    #: when this record (this state of the reply, not the reply) was made: stamped by the
    #: ledger before its fence check, and again on a repair that writes the record anew
    #: (version 5; None: written before, when ``created_at`` stood in for it). Not compared:
    #: a record written again is the same record
    written_at: datetime | None = field(default=None, compare=False)
    v: int = LEDGER_VERSION

    def with_state(self, state: ReplyState, **changes: Any) -> ReplyRecord:
        return replace(self, state=state, **changes)

    @property
    def made_at(self) -> datetime:
        """When this record was made: ``written_at``, or for an older record its reply's
        ``created_at``."""
        return self.written_at or self.created_at

    def encode(self) -> bytes:
        # by hand, not dataclasses.asdict (which deep-copies): this runs twice per reply
        data = {
            "key": self.key,
            "inbox_id": self.inbox_id,
            "message_id": self.message_id,
            "thread_key": self.thread_key,
            "state": self.state.value,
            "created_at": self.created_at.isoformat(),
            "reply_text": self.reply_text,
            "sent_message_id": self.sent_message_id,
            "covered_by": self.covered_by,
            "attempts": self.attempts,
            "error": self.error,
            "channel": self.channel,
            "reason": self.reason,
            "message_at": self.message_at.isoformat() if self.message_at else None,
            "covers": list(self.covers) if self.covers is not None else None,
            "usage": self.usage.to_json() if self.usage is not None else None,
            "approval": self.approval.to_json() if self.approval is not None else None,
            "written_at": self.written_at.isoformat() if self.written_at else None,
            "v": self.v,
        }
        return dumps_compact(data)

    @classmethod
    def decode(cls, value: bytes | str) -> ReplyRecord:
        """``value``'s record; the records of the last ``DECODED_KEPT`` values decoded
        (each up to ``DECODED_KEPT_SIZE`` long) are kept and given again: a record is
        immutable, and a reply's record is read several times on its way."""
        if not isinstance(value, bytes | str) or len(value) > DECODED_KEPT_SIZE:
            return _decode(value)  # a bytearray or memoryview cannot be a kept one's key
        return _decode_kept(value)


def state_bytes(state: ReplyState) -> bytes:
    """The bytes every encoded record in ``state`` holds (:meth:`ReplyRecord.encode` is
    compact JSON): a scan decodes only the values that contain them."""
    return b'"state":"' + state.value.encode() + b'"'


#: how many decoded ledger records :meth:`ReplyRecord.decode` keeps, and the longest kept
DECODED_KEPT = 1024
DECODED_KEPT_SIZE = 16 * 1024


def _decode(value: bytes | str) -> ReplyRecord:
    try:
        data = loads(value)
        if data.get("v") not in KNOWN_LEDGER_VERSIONS:
            raise SchemaError(
                f"ledger record version {data.get('v')!r} is not known to this onceonly "
                f"(it reads up to {LEDGER_VERSION}); upgrade every worker"
            )
        data["state"] = ReplyState(data["state"])
        data["created_at"] = datetime.fromisoformat(data["created_at"])
        for when in ("message_at", "written_at"):
            if data.get(when):
                data[when] = datetime.fromisoformat(data[when])
        if data.get("covers") is not None:
            data["covers"] = tuple(str(key) for key in data["covers"])
        if data.get("usage") is not None:
            data["usage"] = Usage.from_json(data["usage"])
        if data.get("approval") is not None:
            data["approval"] = Approval.from_json(data["approval"])
        data["v"] = LEDGER_VERSION
        return ReplyRecord(**data)
    except SchemaError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise SchemaError(f"ledger record cannot be decoded: {exc!r}") from exc


_decode_kept = functools.lru_cache(maxsize=DECODED_KEPT)(_decode)


class EventState(StrEnum):
    ACCEPTED = "accepted"
    IN_PROGRESS = "in_progress"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class EventEntry:
    """The dedupe table's value for one (provider, event_id)."""

    state: EventState
    updated_at_ms: int
    #: the deliveries-topic offset of the record that owns this event; a crash makes
    #: that same record come back, and it resumes instead of being skipped
    owner: tuple[int, int] = field(default=(-1, -1))

    def to_json(self) -> list[Any]:
        return [self.state.value, self.updated_at_ms, list(self.owner)]

    @classmethod
    def from_json(cls, data: list[Any]) -> EventEntry:
        state, updated, owner = data
        return cls(EventState(state), int(updated), (int(owner[0]), int(owner[1])))
