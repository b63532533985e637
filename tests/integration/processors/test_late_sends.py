"""A send that outlived its client: the worker gave up, recorded the reply *failed* and
dead-lettered it, and then the mail API sent the email. The worker reads the thread again
``ONCEONLY_LATE_SEND_CHECK_S`` later and records the reply *sent* (onceonly.processors.
reply.late_sends), on a real broker, through the agentmail SDK.

The fake mail API holds the first request's key in flight and sends only after
``send_delay_s`` (its handler is not cancelled when the client gives up), as a request
delivered late by TCP after a partition would be; every retry meanwhile gets 409 in flight.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from onceonly.processors.writer.contract import reply_key
from onceonly.schemas.ledger import ReplyState
from tests.integration.workers import (
    INBOX,
    Stack,
    WorkerProcess,
    dead_letters,
    ledger_records,
    sent_to,
    state_of,
    until,
)

pytestmark = pytest.mark.integration

MESSAGE, THREAD = "<late-1@example.com>", "t-late"


async def test_a_reply_recorded_failed_whose_email_went_out_after_all_is_recorded_sent(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=0)
    stack.mail.faults.send_delay_s = 12.0  # sent long after the worker gave up on it
    stack.worker(
        ONCEONLY_SEND_TIMEOUT_S="1",
        ONCEONLY_SEND_ATTEMPTS="2",
        ONCEONLY_SEND_IN_FLIGHT_WAIT_S="2",
        ONCEONLY_LATE_SEND_CHECK_S="20",
        ONCEONLY_LEDGER_AUDIT_S="1",
    )
    key = reply_key(INBOX, MESSAGE)

    await stack.deliver(stack.seed(MESSAGE, THREAD))
    await until(stack, lambda: state_of(stack, key) is ReplyState.FAILED, "the failed record")
    assert sent_to(stack) == Counter()  # given up before the email went out
    await until(stack, lambda: state_of(stack, key) is ReplyState.SENT, "recorded sent after all")

    [email] = stack.mail.outbox
    assert (email.replied_to_message_id, ledger_records(stack)[key].sent_message_id) == (
        MESSAGE,
        email.sent_message_id,
    )
    [letter] = dead_letters(stack)  # open: its retry finds the key settled
    assert letter["check"] == "send_failed"
    assert "a reply recorded failed was sent after all" in stack.workers[0].log()


#: a send given up on after about 5 s, its thread read again 20 s after it failed
_TAKE_OVER_ENV = {
    "ONCEONLY_SEND_TIMEOUT_S": "1",
    "ONCEONLY_SEND_ATTEMPTS": "2",
    "ONCEONLY_SEND_IN_FLIGHT_WAIT_S": "2",
    "ONCEONLY_LATE_SEND_CHECK_S": "20",
    "ONCEONLY_LEDGER_AUDIT_S": "1",
}


async def test_a_failed_reply_left_by_a_killed_worker_is_recorded_sent_by_the_next_one(
    stack_factory: Callable[..., Stack],
) -> None:
    # the worker that recorded the reply failed is killed before its check; the next owner's
    # take-over reads the ledger partition, finds the failed send and reads its thread when
    # due (late_sends.LateSends.taken)
    stack = stack_factory(reorder_window_ms=0)
    stack.mail.faults.send_delay_s = 12.0
    env = _TAKE_OVER_ENV
    first = stack.worker("w1", **env)
    key = reply_key(INBOX, MESSAGE)

    await stack.deliver(stack.seed(MESSAGE, THREAD))
    await until(stack, lambda: state_of(stack, key) is ReplyState.FAILED, "the failed record")
    first.kill()
    assert sent_to(stack) == Counter()
    second = stack.worker("w2", **env)
    await until(stack, lambda: state_of(stack, key) is ReplyState.SENT, "recorded sent after all")

    [email] = stack.mail.outbox
    assert ledger_records(stack)[key].sent_message_id == email.sent_message_id
    assert "a reply recorded failed was sent after all" in second.log()


async def test_a_failed_reply_left_by_a_killed_worker_is_recorded_sent_by_a_running_one(
    stack_factory: Callable[..., Stack],
) -> None:
    # two workers share four partitions; the one that recorded the reply failed is killed
    # before its check, and the other, running all along, is given its partitions in a
    # rebalance: its take-over of the partition finds the failed send (not a fresh start's)
    stack = stack_factory(reorder_window_ms=0)
    stack.mail.faults.send_delay_s = 12.0
    workers = [stack.worker(name, **_TAKE_OVER_ENV) for name in ("w1", "w2")]
    await until(
        stack,
        lambda: all("active_partitions=6" in _recovered(w) for w in workers),
        "both workers owning two partitions (and their three tables)",
    )
    key = reply_key(INBOX, MESSAGE)

    await stack.deliver(stack.seed(MESSAGE, THREAD))
    await until(stack, lambda: state_of(stack, key) is ReplyState.FAILED, "the failed record")
    [recorder] = [w for w in workers if "reply dead-lettered" in w.log()]
    [heir] = [w for w in workers if w is not recorder]
    recorder.kill()
    assert sent_to(stack) == Counter()
    await until(stack, lambda: state_of(stack, key) is ReplyState.SENT, "recorded sent after all")

    [email] = stack.mail.outbox
    assert ledger_records(stack)[key].sent_message_id == email.sent_message_id
    assert "a reply recorded failed was sent after all" in heir.log()


def _recovered(worker: WorkerProcess) -> str:
    """The worker's last "tables recovered" log line ("" before any)."""
    lines = [line for line in worker.log().splitlines() if "tables recovered" in line]
    return lines[-1] if lines else ""
