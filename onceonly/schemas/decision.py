"""Records of the decisions topic: what the worker decided not to do, and why.

The deliveries, ledger, dead-letter and changelog topics already say when an event was
claimed, answered or dead-lettered. What they do not say is why a delivery led to
nothing: a duplicate skipped by dedupe, the agent's own mail, a reply the ledger already
had. The worker writes one of these records for each such skip, off the ack path, to a
time-retained topic, keyed by thread and on the partition of the delivery it names, so
``onceonly trace`` and the operator page can show it. Versioned like the envelope.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from onceonly.schemas.codec import versioned
from onceonly.schemas.exceptions import SchemaError

DECISION_VERSION = 1


class Stage(StrEnum):
    """Where in the pipeline a delivery was let go."""

    HOLD = "hold"  #: the same event is held in its thread's buffer already
    DEDUPE = "dedupe"  #: the events table: duplicate, in progress, failed
    MESSAGE = "message"  #: not a message to answer: own mail, spam, another type
    LEDGER = "ledger"  #: the reply ledger had it: already answered, or declined
    HANDLER = "handler"  #: a non-mail event with no ONCEONLY_EVENT_HANDLER


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """One delivery the worker let go: where, why, and the ids that name it."""

    stage: Stage
    reason: str  #: the short reason, as in the metrics' labels (``duplicate``, ``own_message``)
    provider: str
    event_id: str
    message_id: str | None
    thread_key: str
    partition: int  #: of the delivery record on the deliveries topic
    offset: int
    replay: bool
    at: datetime  #: when the worker decided (its clock)
    detail: str | None = None  #: for a person: the ledger state, the writer's reason
    kind: str = "skip"
    v: int = DECISION_VERSION

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "stage": self.stage.value,
            "reason": self.reason,
            "detail": self.detail,
            "provider": self.provider,
            "event_id": self.event_id,
            "message_id": self.message_id,
            "thread_key": self.thread_key,
            "partition": self.partition,
            "offset": self.offset,
            "replay": self.replay,
            "at": self.at.isoformat(),
            "v": self.v,
        }

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), ensure_ascii=False, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, value: bytes | str) -> DecisionRecord:
        try:
            data = versioned(value, DECISION_VERSION, "decision record")
            return cls(
                stage=Stage(data["stage"]),
                reason=str(data["reason"]),
                detail=data.get("detail"),
                provider=str(data["provider"]),
                event_id=str(data["event_id"]),
                message_id=data.get("message_id"),
                thread_key=str(data["thread_key"]),
                partition=int(data["partition"]),
                offset=int(data["offset"]),
                replay=bool(data.get("replay", False)),
                at=datetime.fromisoformat(data["at"]),
                kind=str(data.get("kind", "skip")),
            )
        except SchemaError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise SchemaError(f"decision record cannot be decoded: {exc!r}") from exc
