"""Approval records on the wire, and the ledger record's version 4."""

from __future__ import annotations

import json

import pytest

from onceonly.schemas.approval import Approval, ApprovalDecision, Verdict
from onceonly.schemas.exceptions import SchemaError
from onceonly.schemas.ledger import LEDGER_VERSION, ReplyRecord, ReplyState
from tests.unit.schemas._samples import AT, DECISION, changed


def test_a_decision_with_an_unknown_action_is_refused() -> None:
    with pytest.raises(SchemaError, match="cannot be decoded"):
        ApprovalDecision.decode(changed(DECISION, action="maybe"))


def test_an_awaiting_draft_with_its_approval_survives_the_ledger() -> None:
    approval = Approval(Verdict.EDITED, "ana", AT, "d-1", draft_text="the writer's text")
    record = ReplyRecord(
        "reply-abc",
        "i",
        "<m@x>",
        "agentmail:t",
        ReplyState.AWAITING,
        AT,
        "edited",
        approval=approval,
    )

    decoded = ReplyRecord.decode(record.encode())

    assert decoded == record
    assert decoded.v == LEDGER_VERSION == 5


def test_a_version_3_record_still_decodes_without_an_approval() -> None:
    record = ReplyRecord("reply-abc", "i", "<m@x>", "agentmail:t", ReplyState.SENT, AT, "hi")
    data = json.loads(record.encode())
    del data["approval"]
    data["v"] = 3

    decoded = ReplyRecord.decode(json.dumps(data))

    assert decoded.approval is None
    assert decoded.state is ReplyState.SENT
