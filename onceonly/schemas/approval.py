"""Approval records: what a person decided on a draft, as a record and as the ledger keeps it.

A decision (:class:`ApprovalDecision`) is produced to the deliveries topic, keyed by the
reply's thread with the ``onceonly-approval`` header, so the partition's owner applies it
on the thread's lane, in the thread's order, wherever it was made (the CLI, the operator
page, ``POST /approvals/{key}``). Once applied, the reply's ledger record carries an
:class:`Approval`: who decided, when, and what (ledger version 4). Versioned like the envelope.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from onceonly.schemas.codec import versioned
from onceonly.schemas.exceptions import SchemaError

APPROVAL_VERSION = 1
#: the deliveries-topic header that marks an approval decision (its value: the version)
APPROVAL_HEADER = "onceonly-approval"


class Action(StrEnum):
    APPROVE = "approve"  #: send the draft, or ``text`` in its place (an edit)
    REJECT = "reject"  #: send nothing: the reply is *declined* with the reason
    #: ONCEONLY_APPROVAL_TIMEOUT passed with ONCEONLY_APPROVAL_ON_TIMEOUT=decline (the worker's)
    TIME_OUT = "time_out"


class Verdict(StrEnum):
    """What was decided, as the ledger and the metrics name it."""

    APPROVED = "approved"  #: the draft's text sent as it was
    EDITED = "edited"  #: a person's text sent in the draft's place
    REJECTED = "rejected"
    TIMED_OUT = "timed_out"  #: ONCEONLY_APPROVAL_TIMEOUT passed: declined


@dataclass(frozen=True, slots=True)
class Approval:
    """The decision applied to a reply: kept on its ledger record (version 4)."""

    verdict: Verdict
    by: str  #: who decided (a person, a bot's name, ``onceonly`` for a timeout)
    at: datetime  #: when the decision was made (the deciding side's clock)
    decision_id: str
    #: the writer's text, when a person's edit replaced it (the record's text is the edit)
    draft_text: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.value,
            "by": self.by,
            "at": self.at.isoformat(),
            "decision_id": self.decision_id,
            "draft_text": self.draft_text,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Approval:
        return cls(
            verdict=Verdict(data["verdict"]),
            by=str(data["by"]),
            at=datetime.fromisoformat(data["at"]),
            decision_id=str(data["decision_id"]),
            draft_text=data.get("draft_text"),
        )


def draft_digest(text: str | None) -> str:
    """The SHA-256 (hex) of a draft's text: what a decision names as the draft it was made on."""
    return hashlib.sha256((text or "").encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class ApprovalDecision:
    """One person's decision on one draft, as produced to the deliveries topic."""

    decision_id: str  #: unique per decision: the answer to its maker is found by it
    key: str  #: the reply's idempotency key (the draft's ledger key)
    thread_key: str  #: the record's Kafka key: the thread's partition and lane
    action: Action
    by: str
    at: datetime
    text: str | None = None  #: an edit: sent in place of the draft's text
    reason: str | None = None  #: why it was rejected
    #: :func:`draft_digest` of the draft's text as its maker read it (None: a timeout's, or
    #: a decision made before decisions named their draft); the owner refuses the decision
    #: when the draft it holds has another text (the simulator's finding F12)
    draft: str | None = None
    v: int = APPROVAL_VERSION

    def encode(self) -> bytes:
        data = {
            "decision_id": self.decision_id,
            "key": self.key,
            "thread_key": self.thread_key,
            "action": self.action.value,
            "by": self.by,
            "at": self.at.isoformat(),
            "text": self.text,
            "reason": self.reason,
            "draft": self.draft,
            "v": self.v,
        }
        return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, value: bytes | str) -> ApprovalDecision:
        try:
            data = versioned(value, APPROVAL_VERSION, "approval decision")
            text, reason, draft = data.get("text"), data.get("reason"), data.get("draft")
            return cls(
                decision_id=str(data["decision_id"]),
                key=str(data["key"]),
                thread_key=str(data["thread_key"]),
                action=Action(data["action"]),
                by=str(data["by"]),
                at=datetime.fromisoformat(data["at"]),
                text=str(text) if text is not None else None,
                reason=str(reason) if reason is not None else None,
                draft=str(draft) if draft is not None else None,
            )
        except SchemaError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise SchemaError(f"approval decision cannot be decoded: {exc!r}") from exc
