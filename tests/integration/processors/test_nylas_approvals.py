"""Approval on Nylas: a draft superseded by a newer message of its thread, the new draft
edited and approved over HTTP, sent once through the real nylas SDK to the fake API."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from onceonly.processors.writer.contract import reply_key
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from tests.integration.processors.test_approvals import TOKEN, _post
from tests.integration.processors.test_nylas import GRANT, NylasStack, nylas, nylas_stack
from tests.integration.workers import ledger_records, until, writer_env

pytestmark = pytest.mark.integration
__all__ = ["nylas", "nylas_stack"]  # the fixtures, used here by name


async def test_nylas_a_superseded_draft_is_refused_and_the_edited_new_one_sent_once(
    nylas_stack: NylasStack,
) -> None:
    stack = nylas_stack
    worker = stack.worker(
        ONCEONLY_APPROVAL="always",
        ONCEONLY_OPS_TOKEN=TOKEN,
        ONCEONLY_REORDER_WINDOW_MS="0",
        **writer_env(stack),
    )
    now = datetime.now(UTC).timestamp()
    for message_id, age_s in (("q1", 60), ("q2", 30)):
        stack.nylas.seed_message(
            GRANT, message_id=message_id, thread_id="thread-n", date=now - age_s
        )
    old_key, new_key = reply_key(GRANT, "q1"), reply_key(GRANT, "q2")

    def state(key: str) -> ReplyState | None:
        record: ReplyRecord | None = ledger_records(stack).get(key)
        return record.state if record is not None else None

    await stack.deliver(stack.notification("q1", "thread-n", seed=False))
    await until(stack, lambda: state(old_key) is ReplyState.AWAITING, "the first draft")
    await stack.deliver(stack.notification("q2", "thread-n", seed=False))
    await until(stack, lambda: state(new_key) is ReplyState.AWAITING, "the new draft")

    old = _post(worker.port, old_key, {"action": "approve", "by": "ana"})
    new = _post(worker.port, new_key, {"action": "approve", "by": "ana", "text": "Edited."})

    assert old[0] == 409 and f"superseded by the newer reply {new_key}" in old[1]["detail"]
    assert new[0] == 200 and new[1]["state"] == "sent"
    [email] = stack.nylas.outbox
    assert (email.reply_to_message_id, email.body) == ("q2", "Edited.")
    assert email.idempotency_key == new_key
    record = ledger_records(stack)[new_key]
    assert record.channel == "nylas" and record.covers == (old_key,)
    assert "2 message(s)" in (record.approval.draft_text or "")  # type: ignore[union-attr]
