"""Approval with real worker processes, the real broker and the local AgentMail server:
a draft, decided from the CLI and the HTTP API, is sent once, with the approved text."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

from onceonly.operations.approvals import decision_for, producer
from onceonly.processors.approval.decisions import ANSWERED_APART
from onceonly.processors.reply.bursts import supersede
from onceonly.processors.writer.contract import reply_key
from onceonly.schemas.approval import Action
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from testkit import payloads
from tests.integration.workers import (
    INBOX,
    Stack,
    dead_letters,
    ledger_records,
    onceonly,
    state_of,
    until,
    verdict,
    writer_env,
)

pytestmark = pytest.mark.integration

TOKEN = "approve-token"


def _post(port: int, key: str, body: dict[str, Any], token: str | None = TOKEN) -> tuple[int, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/approvals/{key}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"}
        | ({"Authorization": f"Bearer {token}"} if token else {}),
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return int(answer.status), json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), json.loads(exc.read())


async def _draft(stack: Stack, message_id: str = "<m1@x>", thread: str = "thr-a") -> ReplyRecord:
    """Deliver one message and wait for its draft to be recorded awaiting approval."""
    await stack.deliver(stack.seed(message_id, thread))
    found: list[ReplyRecord] = []

    def drafted() -> bool:
        found[:] = [r for r in ledger_records(stack).values() if r.state is ReplyState.AWAITING]
        return bool(found)

    await until(stack, drafted, "a draft awaiting approval")
    return found[0]


def _worker(stack: Stack, name: str = "w1", **env: str) -> Any:
    return stack.worker(
        name, ONCEONLY_APPROVAL="always", ONCEONLY_OPS_TOKEN=TOKEN, **writer_env(stack), **env
    )


async def _drafted(stack_factory: Callable[..., Stack]) -> tuple[Stack, Any, ReplyRecord]:
    """A stack with no reorder window and a worker that drafts every reply; the draft of
    one message, awaiting approval."""
    stack = stack_factory(reorder_window_ms=0)
    worker = _worker(stack)
    return stack, worker, await _draft(stack)


async def _redrafted(stack: Stack, old: ReplyRecord) -> ReplyRecord:
    """A newer message in ``old``'s thread; the new draft, covering both, once recorded."""
    await stack.deliver(stack.seed("<m2@x>", "thr-a", timestamp="2026-11-29T10:05:00.000Z"))
    newer: list[ReplyRecord] = []

    def redrafted() -> bool:
        records = ledger_records(stack).values()
        newer[:] = [r for r in records if r.state is ReplyState.AWAITING and r.key != old.key]
        return bool(newer)

    await until(stack, redrafted, "a new draft covering both messages")
    [new] = newer
    return new


async def _approved_then_killed(worker: Any, draft: ReplyRecord, moment: Awaitable[Any]) -> None:
    """Ana approves ``draft`` over HTTP with the text "approved"; ``worker`` is killed once
    ``moment`` comes, and the approval's call ends, answered or not."""
    body = {"action": "approve", "by": "ana", "text": "approved"}
    api = asyncio.ensure_future(asyncio.to_thread(_post, worker.port, draft.key, body))
    await moment
    worker.kill()
    await asyncio.gather(api, return_exceptions=True)


async def _sent_once_by_the_next_owner(stack: Stack, draft: ReplyRecord) -> None:
    """A second worker, on the killed one's state, records ``draft``'s approved text sent:
    one email, with the approved text and the draft's key."""
    _worker(stack, "w2", state_of="w1")
    await until(stack, lambda: state_of(stack, draft.key) is ReplyState.SENT, "recorded sent")
    assert [(e.text, e.idempotency_key) for e in stack.mail.outbox] == [("approved", draft.key)]


async def test_always_a_draft_approved_from_the_cli_is_sent_once_with_its_text(
    stack_factory: Callable[..., Stack], tmp_path: Any
) -> None:
    stack, _, draft = await _drafted(stack_factory)
    assert stack.mail.outbox == []
    listed = onceonly(stack, "approvals", "list", "--json")
    assert [json.loads(line)["key"] for line in listed.stdout.splitlines()] == [draft.key]

    approved = onceonly(stack, "approvals", "approve", draft.key, "--by", "ana")

    assert approved.returncode == 0, approved.stderr
    answer = json.loads(approved.stdout)
    assert (answer["status"], answer["state"], answer["decided_by"]) == ("applied", "sent", "ana")
    [email] = stack.mail.outbox
    assert (email.text, email.idempotency_key) == (draft.reply_text, draft.key)
    record = ledger_records(stack)[draft.key]
    assert record.state is ReplyState.SENT
    assert record.approval is not None and record.approval.by == "ana"
    again = onceonly(stack, "approvals", "approve", draft.key, "--by", "bob")
    assert json.loads(again.stdout)["status"] == "already"
    assert len(stack.mail.outbox) == 1
    traced = onceonly(stack, "trace", draft.key).stdout
    assert "approved by ana" in traced and "sent text" in traced
    assert (draft.reply_text or "")[:40] in traced


async def test_two_approvals_at_once_from_the_api_and_the_cli_send_one_email(
    stack_factory: Callable[..., Stack],
) -> None:
    stack, worker, draft = await _drafted(stack_factory)
    edit = stack.tmp / "edit.txt"
    edit.write_text("the CLI's edit")

    api, cli = await asyncio.gather(
        asyncio.to_thread(_post, worker.port, draft.key, {"action": "approve", "by": "slack-bot"}),
        asyncio.to_thread(
            onceonly, stack, "approvals", "approve", draft.key, "--text-file", str(edit)
        ),
    )

    await stack.until_sent(1)
    [email] = stack.mail.outbox
    record = ledger_records(stack)[draft.key]
    assert record.state is ReplyState.SENT and record.approval is not None
    by_cli = record.approval.by != "slack-bot"
    assert email.text == ("the CLI's edit" if by_cli else draft.reply_text)
    cli_status = json.loads(cli.stdout)["status"]
    if by_cli:  # the plain approval after the edit: the same decision, nothing more sent
        assert (cli_status, api[0], api[1]["status"]) == ("applied", 200, "already")
    else:  # the edit after the plain approval: refused with the state, never sent
        assert (api[1]["status"], cli_status, cli.returncode) == ("applied", "refused", 1)


async def test_a_rejected_draft_sends_nothing_and_is_declined_with_the_reason(
    stack_factory: Callable[..., Stack],
) -> None:
    stack, worker, draft = await _drafted(stack_factory)

    rejected = onceonly(stack, "approvals", "reject", draft.key, "--reason", "wrong amount")
    late = _post(worker.port, draft.key, {"action": "approve", "by": "bob"})

    assert rejected.returncode == 0, rejected.stderr
    record = ledger_records(stack)[draft.key]
    assert record.state is ReplyState.DECLINED
    assert record.reason is not None and record.reason.endswith("wrong amount")
    assert late[0] == 409 and late[1]["state"] == "declined"
    # the same message again (a redelivery, a replay, catch-up): skipped, not drafted again
    again = payloads.agentmail_received(inbox_id=INBOX, thread_id="thr-a", message_id="<m1@x>")
    await stack.deliver(again)
    await until(stack, lambda: "reason=skip_declined" in worker.log(), "the redelivery skipped")
    assert stack.mail.outbox == []


async def test_a_wrong_token_is_403_and_an_unknown_key_404_and_neither_changes_anything(
    stack_factory: Callable[..., Stack],
) -> None:
    stack, worker, draft = await _drafted(stack_factory)
    before = ledger_records(stack)

    wrong = _post(worker.port, draft.key, {"action": "approve", "by": "x"}, token="nope")
    none = _post(worker.port, draft.key, {"action": "approve", "by": "x"}, token=None)
    unknown = _post(worker.port, "reply-" + "0" * 64, {"action": "approve", "by": "x"})

    assert (wrong[0], none[0], unknown[0]) == (403, 403, 404)
    assert ledger_records(stack) == before
    assert stack.mail.outbox == []
    ok = _post(worker.port, draft.key, {"action": "approve", "by": "ana", "text": "edited"})
    assert ok[0] == 200 and ok[1]["state"] == "sent"
    assert [e.text for e in stack.mail.outbox] == ["edited"]


async def test_a_worker_killed_right_after_the_approval_was_recorded_leaves_it_to_the_next_owner(
    stack_factory: Callable[..., Stack],
) -> None:
    stack, worker, draft = await _drafted(stack_factory)
    stack.mail.set_latency(10)  # the send waits before the API handles it: nothing is sent

    def approved() -> bool:
        record = ledger_records(stack).get(draft.key)
        return record is not None and record.state is ReplyState.PENDING

    await _approved_then_killed(worker, draft, until(stack, approved, "the approval recorded"))
    stack.mail.set_latency(0)

    await _sent_once_by_the_next_owner(stack, draft)


async def test_a_worker_killed_during_the_approved_send_is_not_sent_again_by_the_next_owner(
    stack_factory: Callable[..., Stack],
) -> None:
    # the API sent the approved email but its answer never reached the killed worker; the
    # API ignores keys, so only the next owner's look in the thread keeps it to one email
    stack, worker, draft = await _drafted(stack_factory)
    stack.mail.ignore_keys()
    stack.mail.faults.answer_delay_s = 8  # ends before the fake stops; the kill comes first

    # killed once the email is out, its answer held
    await _approved_then_killed(worker, draft, stack.until_sent(1))
    stack.mail.faults.answer_delay_s = 0

    await _sent_once_by_the_next_owner(stack, draft)


async def test_a_newer_message_supersedes_the_waiting_draft_and_the_old_is_refused(
    stack_factory: Callable[..., Stack],
) -> None:
    stack, worker, old = await _drafted(stack_factory)
    new = await _redrafted(stack, old)

    refused = onceonly(stack, "approvals", "approve", old.key, "--by", "ana")
    approved = _post(worker.port, new.key, {"action": "approve", "by": "ana"})

    assert new.covers == (old.key,) and new.message_id == "<m2@x>"
    assert ledger_records(stack)[old.key].covered_by == new.key
    assert refused.returncode == 1
    assert f"superseded by the newer reply {new.key}" in refused.stderr + refused.stdout
    assert approved[0] == 200 and approved[1]["state"] == "sent"
    [email] = stack.mail.outbox
    assert (email.replied_to_message_id, email.text) == ("<m2@x>", new.reply_text)
    assert "2 message(s)" in (new.reply_text or "")  # the writer saw both


async def test_after_a_restart_drafts_are_listed_approvable_and_time_out_from_their_draft(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=0)
    timeout_s = 25.0
    env = {"ONCEONLY_APPROVAL_TIMEOUT": str(timeout_s), "ONCEONLY_APPROVAL_ON_TIMEOUT": "decline"}
    worker = _worker(stack, **env)
    first = await _draft(stack, "<a@x>", "thr-a")
    await stack.deliver(stack.seed("<b@x>", "thr-b"))
    drafts: dict[str, ReplyRecord] = {}

    def both() -> bool:
        records = ledger_records(stack).values()
        drafts.update({r.key: r for r in records if r.state is ReplyState.AWAITING})
        return len(drafts) == 2

    await until(stack, both, "two drafts")
    second = next(r for r in drafts.values() if r.key != first.key)
    while (time.time() - second.created_at.timestamp()) < 15:  # a restart late in the wait
        await asyncio.sleep(0.2)
    worker.kill()
    restarted = time.time()
    _worker(stack, "w2", state_of="w1", **env)

    listed = onceonly(stack, "approvals", "list", "--json")
    keys = {json.loads(line)["key"] for line in listed.stdout.splitlines()}
    approved = onceonly(stack, "approvals", "approve", first.key, "--by", "ana")

    def timed_out() -> bool:
        return ledger_records(stack)[second.key].state is ReplyState.DECLINED

    await until(stack, timed_out, "the second draft declined by the timeout", timeout_s=60)
    declined = ledger_records(stack)[second.key]
    assert keys == {first.key, second.key}
    assert json.loads(approved.stdout)["state"] == "sent"
    assert [e.replied_to_message_id for e in stack.mail.outbox] == ["<a@x>"]
    assert declined.approval is not None and declined.approval.verdict.value == "timed_out"
    waited = declined.approval.at.timestamp() - second.created_at.timestamp()
    assert waited >= timeout_s  # never early
    assert (
        declined.approval.at.timestamp() - restarted < timeout_s
    )  # from the draft, not the restart


async def test_an_approved_draft_whose_send_fails_is_dead_lettered_with_the_message_it_covers(
    stack_factory: Callable[..., Stack],
) -> None:
    """F11: the mail API answers 503 to every send of the approved draft; its dead letter
    carries the envelopes of both messages it answers (the superseded draft's too), and a
    retry of the letter sends the approved text once, covering both."""
    stack, _, old = await _drafted(stack_factory)
    new = await _redrafted(stack, old)
    stack.mail.fail_next(1000, status=503)

    onceonly(stack, "approvals", "approve", new.key, "--by", "ana")
    await until(stack, lambda: state_of(stack, new.key) is ReplyState.FAILED, "the failed send")
    stack.mail.faults.fail_remaining = 0

    [letter] = [x for x in dead_letters(stack) if x.get("key") == new.key]
    sent_again = sorted(e["message_id"] for e in letter["envelopes"])
    assert sent_again == ["<m1@x>", "<m2@x>"] and stack.mail.outbox == []
    retried = onceonly(stack, "dead-letters", "retry")
    assert retried.returncode == 0, retried.stderr
    await stack.until_sent(1)
    [email] = stack.mail.outbox
    assert (email.replied_to_message_id, email.text) == ("<m2@x>", new.reply_text)
    assert state_of(stack, new.key) is ReplyState.SENT
    judged = verdict(stack, ["<m1@x>", "<m2@x>"])
    assert judged.passed, judged.violations


async def _landed_after_draft(
    stack: Stack, late: Callable[[ReplyRecord], Sequence[ReplyRecord]]
) -> ReplyRecord:
    """m1 drafted by w1, which stops; the records ``late`` makes of m1's draft land in the
    ledger, as late writers (past their fence checks) leave them; w2 starts. m1's draft."""
    worker = _worker(stack)
    old = await _draft(stack)
    worker.stop()
    for record in late(old):
        await stack.producer.produce(
            stack.settings.ledger_topic, record.encode(), key=record.key.encode(), partition=0
        )
    _worker(stack, "w2")
    return old


def _m2_of(old: ReplyRecord, **fields: Any) -> ReplyRecord:
    """Another writer's reply to m2 (``fields``), made from m1's draft ``old``."""
    key = reply_key(INBOX, "<m2@x>")
    return dataclasses.replace(old, key=key, message_id="<m2@x>", **{"covers": (), **fields})


async def _marked_then_theirs(stack: Stack, **theirs: Any) -> tuple[ReplyRecord, ReplyRecord]:
    """m1's draft marked superseded by m2, then another writer's reply to m2 (``theirs``:
    its fields), written by a writer that saw m2 alone, landed (the simulator's finding
    F32). Returns m1's draft and their reply."""
    old = await _landed_after_draft(
        stack, lambda old: [supersede(old, _m2_of(old).key), _m2_of(old, **theirs)]
    )
    return old, _m2_of(old, **theirs)


async def test_a_newer_draft_landed_late_without_a_superseded_draft_is_written_again_with_it(
    stack_factory: Callable[..., Stack],
) -> None:
    # the simulator's finding F32: a worker marked m1's draft superseded by m2 and stopped
    # before m2's reply was recorded; a worker past its fence check then landed its own
    # draft of m2, written by a writer that saw m2 alone. The next owner, given m2 again,
    # writes m2's draft again with m1 recalled from the thread
    stack = stack_factory(partitions=1, reorder_window_ms=0)
    old, theirs = await _marked_then_theirs(stack, reply_text="their draft of m2 alone")
    new_key = theirs.key
    await stack.deliver(stack.seed("<m2@x>", "thr-a", timestamp="2026-11-29T10:05:00.000Z"))

    def rewritten() -> bool:
        record = ledger_records(stack).get(new_key)
        return record is not None and record.reply_text != theirs.reply_text

    await until(stack, rewritten, "m2's draft written again")
    new = ledger_records(stack)[new_key]
    assert (new.state, new.covers) == (ReplyState.AWAITING, (old.key,))
    assert "2 message(s)" in (new.reply_text or "")  # the writer saw both
    assert ledger_records(stack)[old.key].covered_by == new_key
    assert stack.mail.outbox == []


async def test_a_marked_draft_after_a_late_older_message_is_answered_anew_with_it(
    stack_factory: Callable[..., Stack],
) -> None:
    # F32's marks with a late older message: m1's draft marked superseded by m2, whose reply
    # another writer sent without m1; then m0 (older than m1, its webhook late) and m2 come
    # in one burst. The thread is read up to m2, not only before m0: m1 is answered anew
    stack = stack_factory(partitions=1, reorder_window_ms=3000)
    old, theirs = await _marked_then_theirs(stack, state=ReplyState.SENT)
    new_key = theirs.key
    late = "2026-11-29T09:55:00.000Z"
    stack.mail.seed_message(INBOX, message_id="<m0@x>", thread_id="thr-a", timestamp=late)
    m0 = payloads.agentmail_received(
        inbox_id=INBOX, thread_id="thr-a", message_id="<m0@x>", timestamp=late
    )
    m2 = stack.seed("<m2@x>", "thr-a", timestamp="2026-11-29T10:05:00.000Z")
    await asyncio.gather(stack.deliver(m0), stack.deliver(m2))
    m0_key = reply_key(INBOX, "<m0@x>")

    def answered() -> bool:
        records = ledger_records(stack)
        return m0_key in records and records[old.key].covered_by is None

    await until(stack, answered, "m0 drafted and m1's draft answered anew")
    records = ledger_records(stack)
    assert records[old.key].state is ReplyState.AWAITING
    assert (records[new_key].state, records[m0_key].state) == (ReplyState.SENT, ReplyState.AWAITING)
    assert stack.mail.outbox == []


async def test_approving_a_draft_a_newer_draft_covers_is_refused_and_the_newer_sends_once(
    stack_factory: Callable[..., Stack],
) -> None:
    # the simulator's finding F28: two late writers crossed and left m1's draft waiting
    # beside m2's, which covers m1. Approving m1's is refused naming m2's reply, which,
    # approved, answers both in one email
    stack = stack_factory(partitions=1, reorder_window_ms=0)
    text = "m2's draft, covering m1"

    def crossed(old: ReplyRecord) -> list[ReplyRecord]:
        stack.seed("<m2@x>", "thr-a")  # m2 in the thread, after m1
        return [_m2_of(old, reply_text=text, covers=(old.key,))]

    old = await _landed_after_draft(stack, crossed)
    newer = reply_key(INBOX, "<m2@x>")

    refused = onceonly(stack, "approvals", "approve", old.key, "--by", "ana")
    approved = onceonly(stack, "approvals", "approve", newer, "--by", "ana")

    assert json.loads(refused.stdout)["status"] == "refused", refused.stdout
    assert newer in refused.stdout
    assert json.loads(approved.stdout)["status"] == "applied", approved.stdout
    assert [e.text for e in stack.mail.outbox] == [text]
    assert ledger_records(stack)[old.key].covered_by == newer


async def _late_m2_over_sent_m1(stack: Stack) -> ReplyRecord:
    """F28's crossed writers, the third order: m1's draft approved and sent, then a late
    writer's m2 draft covering m1 lands, and the next owner (w2) takes the partition over.
    Returns the late draft."""
    worker = _worker(stack)
    old = await _draft(stack)
    onceonly(stack, "approvals", "approve", old.key, "--by", "ana")
    await stack.until_sent(1)
    worker.stop()
    late = _m2_of(old, reply_text="m2's late draft, covering m1", covers=(old.key,))
    await stack.producer.produce(
        stack.settings.ledger_topic, late.encode(), key=late.key.encode(), partition=0
    )
    _worker(stack, "w2")
    return late


async def test_a_late_newer_draft_covering_a_message_already_sent_is_written_again_without_it(
    stack_factory: Callable[..., Stack],
) -> None:
    # F28's third order: given m2, the worker writes m2's late draft again without m1;
    # approved, it answers m2 alone: one email for each message
    stack = stack_factory(partitions=1, reorder_window_ms=0)
    late = await _late_m2_over_sent_m1(stack)
    await stack.deliver(stack.seed("<m2@x>", "thr-a", timestamp="2026-11-29T10:05:00.000Z"))

    def rewritten() -> bool:
        record = ledger_records(stack).get(late.key)
        return record is not None and record.reply_text != late.reply_text

    await until(stack, rewritten, "m2's draft written again")
    assert ledger_records(stack)[late.key].covers == ()
    onceonly(stack, "approvals", "approve", late.key, "--by", "ana")
    await stack.until_sent(2)
    assert [e.replied_to_message_id for e in stack.mail.outbox] == ["<m1@x>", "<m2@x>"]


async def test_approving_a_late_draft_covering_a_message_already_sent_is_refused(
    stack_factory: Callable[..., Stack],
) -> None:
    # F28's third order, the decision first (before the owner is given m2 again): the CLI
    # refuses it at once; a decision produced all the same (another maker's, past that
    # check) is refused by the worker. m2, delivered, is drafted again without m1
    stack = stack_factory(partitions=1, reorder_window_ms=0)
    late = await _late_m2_over_sent_m1(stack)

    refused = onceonly(stack, "approvals", "approve", late.key, "--by", "ana")
    decision = decision_for(late, Action.APPROVE, "bo")
    await producer(stack.settings)(decision)
    refusal = "the worker's refusal"
    await until(stack, lambda: any(ANSWERED_APART in w.log() for w in stack.workers), refusal)
    await stack.deliver(stack.seed("<m2@x>", "thr-a", timestamp="2026-11-29T10:05:00.000Z"))
    await until(stack, lambda: ledger_records(stack)[late.key].covers == (), "m2 drafted again")
    onceonly(stack, "approvals", "approve", late.key, "--by", "ana")
    await stack.until_sent(2)

    assert json.loads(refused.stdout)["detail"] == ANSWERED_APART, refused.stdout
    assert refused.returncode != 0
    assert [e.replied_to_message_id for e in stack.mail.outbox] == ["<m1@x>", "<m2@x>"]
    assert late.reply_text not in [e.text for e in stack.mail.outbox]


@pytest.mark.parametrize("window_ms", [0, 2000], ids=["window-0", "window-default"])
async def test_a_burst_whose_thread_cannot_be_read_is_dead_lettered_with_the_draft_marked_by_it(
    stack_factory: Callable[..., Stack], window_ms: int
) -> None:
    # the simulator's finding F43: m1's draft marked superseded by m2 by a worker stopped
    # before m2's reply was written; the next owner cannot read the thread (503). A reply
    # to m2 alone would leave m1 covered by a reply whose writer never saw it: the burst is
    # tried again, then dead-lettered naming m1's draft; retried once the thread reads,
    # m2's reply recalls m1; at window 0 and at the default window (m2 held, then released)
    stack = stack_factory(partitions=1, reorder_window_ms=window_ms)
    old = await _landed_after_draft(stack, lambda old: [supersede(old, _m2_of(old).key)])
    stack.mail.faults.thread_fail_remaining = 1000
    await stack.deliver(stack.seed("<m2@x>", "thr-a", timestamp="2026-11-29T10:05:00.000Z"))
    new_key = _m2_of(old).key

    await until(stack, lambda: bool(dead_letters(stack)), "the burst's dead letter")
    [letter] = dead_letters(stack)
    assert [e["message_id"] for e in letter["envelopes"]] == ["<m2@x>"]
    assert "could not be read" in letter["last_error"] and old.key in letter["last_error"]
    assert new_key not in ledger_records(stack)
    stack.mail.faults.thread_fail_remaining = 0
    retried = onceonly(stack, "dead-letters", "retry")
    assert retried.returncode == 0, retried.stderr

    await until(stack, lambda: new_key in ledger_records(stack), "m2's draft")
    new = ledger_records(stack)[new_key]
    assert (new.state, new.covers) == (ReplyState.AWAITING, (old.key,))
    assert "2 message(s)" in (new.reply_text or "")  # the writer saw both
    assert ledger_records(stack)[old.key].covered_by == new_key
