"""The pipeline's decisions without faust: a burst gets one reply; a failure is the record's."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from datetime import UTC, datetime
from typing import Any, NamedTuple

import pytest
from structlog.testing import capture_logs

from onceonly.ingest import normalise
from onceonly.processors.conversation import Conversation
from onceonly.processors.exceptions import BrokerUnavailable
from onceonly.processors.fence import Fence
from onceonly.processors.lanes import Dropped, Job, Lanes
from onceonly.processors.reorder.holds import Delivery, Holds
from onceonly.processors.router import Router
from onceonly.processors.writer.runner import Writer, WriterPolicy
from onceonly.schemas.ledger import EventEntry, EventState, ReplyRecord, ReplyState
from testkit import payloads
from testkit.fakes.agentmail_server import FakeAgentMail
from tests.unit.processors._pipeline import mail_pipeline

INBOX = "support@agentmail.to"


class TopicPartition(NamedTuple):  # a partition as the fence names it
    topic: str
    partition: int


class _DeadLetters:
    def __init__(self) -> None:
        self.letters: list[tuple[str, list[str]]] = []

    async def record_failure(self, envelopes: Any, *, check: str, error: str) -> None:
        self.letters.append((check, [e.event_id for e in envelopes]))

    async def record_reply(self, record: Any, reason: str, envelopes: Any) -> None:
        self.letters.append((reason.split()[0], [e.event_id for e in envelopes]))


def _pipeline(
    mail: FakeAgentMail, writer: Any, approval: str = "never", **more: Any
) -> Conversation:
    write = Writer(writer, WriterPolicy(attempts=2, backoff_initial_s=0.001))
    parts = {"writer": write, "dead_letters": _DeadLetters(), "retry_backoff_s": 0.001}
    return mail_pipeline(mail, approval, **parts | more)


def _record(inbound: Any, state: ReplyState, text: str | None = None) -> ReplyRecord:
    """The ledger record of ``inbound``'s reply in ``state``, as a worker wrote it before."""
    return ReplyRecord(
        key=inbound.key,
        inbox_id=inbound.inbox_id,
        message_id=inbound.message_id,
        thread_key=inbound.thread_key,
        state=state,
        created_at=datetime.now(UTC),
        reply_text=text,
    )


def _delivery(mail: FakeAgentMail, n: int, minute: int) -> Delivery:
    message_id = f"<m{n}@example.com>"
    when = f"2026-11-29T10:{minute:02d}:00.000Z"
    mail.seed_message(INBOX, message_id=message_id, thread_id="thr-burst", timestamp=when)
    payload = payloads.agentmail_received(
        inbox_id=INBOX, thread_id="thr-burst", message_id=message_id, timestamp=when
    )
    envelope = normalise.agentmail(json.dumps(payload), {}, datetime.now(UTC))
    return Delivery(envelope, (0, n))


async def test_a_burst_of_three_gets_one_reply_to_its_latest(mail: FakeAgentMail) -> None:
    given: list[int] = []

    def writer(burst: Any) -> str:
        given.append(len(burst))
        return "one answer to all three"

    pipeline = _pipeline(mail, writer)
    burst = [_delivery(mail, 1, 5), _delivery(mail, 2, 9), _delivery(mail, 3, 7)]
    outcomes: dict[str, bool] = {}

    await pipeline.act(burst, outcomes)

    assert [e.replied_to_message_id for e in mail.outbox] == ["<m2@example.com>"]
    assert given == [3]
    assert all(outcomes[d.envelope.event_id] for d in burst)


async def test_a_writer_that_always_fails_marks_its_events_failed(mail: FakeAgentMail) -> None:
    def writer(burst: Any) -> str:
        raise RuntimeError("503 from the model")

    pipeline = _pipeline(mail, writer)
    delivery = _delivery(mail, 1, 0)
    outcomes: dict[str, bool] = {}

    await pipeline.act([delivery], outcomes)

    assert outcomes == {delivery.envelope.event_id: False}
    assert pipeline.parts.dead_letters.letters == [  # type: ignore[attr-defined]
        ("writer_failed", [delivery.envelope.event_id])
    ]
    assert mail.outbox == []


async def test_an_unexpected_error_is_the_records_dead_letter_not_the_workers(
    mail: FakeAgentMail,
) -> None:
    pipeline = _pipeline(mail, lambda burst: "ok")
    delivery = _delivery(mail, 1, 0)

    async def broken_act(*args: Any, **kwargs: Any) -> None:
        raise ValueError("an odd record")

    pipeline.act = broken_act  # type: ignore[method-assign]
    outcomes: dict[str, bool] = {}

    await pipeline._guarded([delivery], outcomes, None)

    assert outcomes == {delivery.envelope.event_id: False}
    assert pipeline.parts.dead_letters.letters == [  # type: ignore[attr-defined]
        ("record_failed", [delivery.envelope.event_id])
    ]


async def test_the_broker_away_is_the_workers_failure_not_the_records(
    mail: FakeAgentMail,
) -> None:
    """A ledger write the broker did not take may have landed: a dead letter would settle
    the records beside a reply half recorded (a draft marked superseded by a reply never
    written, a pending record whose email went out: the simulator's finding F36). Tried
    once, no letter, no outcome: it escapes, and the worker exits to read them again."""
    pipeline = _pipeline(mail, lambda burst: "ok")
    delivery = _delivery(mail, 1, 0)
    tries: list[int] = []

    async def away(*args: Any, **kwargs: Any) -> None:
        tries.append(1)
        raise BrokerUnavailable("the broker did not take a write to the ledger's changelog")

    pipeline.act = away  # type: ignore[method-assign]
    outcomes: dict[str, bool] = {}

    with pytest.raises(BrokerUnavailable):
        await pipeline._guarded([delivery], outcomes, None)

    assert tries == [1] and outcomes == {}
    assert pipeline.parts.dead_letters.letters == []  # type: ignore[attr-defined]


async def test_the_metrics_page_never_blocks_the_event_loop() -> None:
    """The loop runs while a collector is still collecting: the collector waits (up to
    10 s) for a beat of the loop that comes after it began. Rendered on the loop, no beat
    could come and the wait would run out; no wall-clock gap is measured, so a machine
    too busy to schedule the test for a while does not fail it."""
    import threading

    from prometheus_client import CollectorRegistry
    from prometheus_client.core import GaugeMetricFamily

    from onceonly.processors.runtime.lifecycle import render_metrics

    collecting = threading.Event()
    beat_while_collecting = threading.Event()
    answered: list[bool] = []

    class SlowLag:  # a broker that answers the lag query only once the loop has moved on
        def collect(self) -> Any:
            collecting.set()
            answered.append(beat_while_collecting.wait(timeout=10.0))
            yield GaugeMetricFamily("onceonly_consumer_lag", "lag", value=0)

    registry = CollectorRegistry()
    registry.register(SlowLag())  # type: ignore[arg-type]

    async def heartbeat() -> None:
        while not answered:
            await asyncio.sleep(0.01)
            if collecting.is_set():
                beat_while_collecting.set()

    beat = asyncio.create_task(heartbeat())
    page = await render_metrics(registry)
    await beat

    assert b"onceonly_consumer_lag" in page
    assert answered == [True]  # the loop beat while the collector was collecting


async def test_a_skipped_message_succeeds_even_when_its_bursts_reply_fails(
    mail: FakeAgentMail,
) -> None:
    pipeline = _pipeline(mail, lambda burst: "a reply the API will refuse")
    answerable = _delivery(mail, 1, 0)
    mail.reset()  # the API no longer knows the message: its reply is refused (404)
    skipped_payload = payloads.agentmail_received(
        inbox_id=INBOX, thread_id="thr-burst", event_type="message.sent"
    )
    skipped = Delivery(
        normalise.agentmail(json.dumps(skipped_payload), {}, datetime.now(UTC)), (0, 9)
    )
    outcomes: dict[str, bool] = {}

    await pipeline.act([answerable, skipped], outcomes)

    assert outcomes == {answerable.envelope.event_id: False, skipped.envelope.event_id: True}


async def test_a_newer_message_with_a_pending_reply_is_sent_not_dropped_when_taken_in(
    mail: FakeAgentMail,
) -> None:
    """A worker was killed after recording message 2's reply *pending* (and covering the
    older ones with it). Its replacement answers message 1 and finds message 2 queued on the
    thread's lane: message 2's recorded reply goes out with its own text and key, and its
    event succeeds only then (the cluster chaos run lost exactly that reply: taken into the
    burst, filtered out as already in the ledger, acknowledged, never sent)."""
    pipeline = _pipeline(mail, lambda burst: f"a reply to {len(burst)}")
    first, second = _delivery(mail, 1, 5), _delivery(mail, 2, 9)
    outcomes: dict[str, bool] = {}
    (inbound,) = await pipeline._inbounds([second], outcomes)
    pending = _record(inbound, ReplyState.PENDING, "recorded before the crash")
    await pipeline.parts.ledger.put(pending)
    claimed = [first]

    async def newer() -> Any:  # what Conversation.process does: the queued delivery, claimed
        if second in claimed:
            return []
        claimed.append(second)
        return [inbound]

    await pipeline.act(claimed, outcomes, newer)

    sent = {e.replied_to_message_id: e.text for e in mail.outbox}
    assert sent == {"<m1@example.com>": "a reply to 1", "<m2@example.com>": pending.reply_text}
    assert pipeline.parts.ledger.get(inbound.key).state is ReplyState.SENT
    assert outcomes == {first.envelope.event_id: True, second.envelope.event_id: True}


async def _while_written(
    mail: FakeAgentMail, meanwhile: Delivery, approval: str = "never"
) -> list[tuple[int, list[str]]]:
    """Message 1 answered through its thread's lane while ``meanwhile`` is queued on the
    lane during the writer's first call: each writer call's (lane jobs finished before it,
    message ids), once both jobs are."""
    acked: list[Any] = []
    both = asyncio.Event()

    def ack(record: Any) -> None:
        acked.append(record)
        if len(acked) == 2:
            both.set()

    lanes = Lanes(ack=ack)
    first = _delivery(mail, 1, 5)
    key = first.envelope.thread_key.encode()
    calls: list[tuple[int, list[str]]] = []

    def job(delivery: Delivery) -> Job:
        return Job(run=lambda j: _done(pipeline.process(j, [j.item])), records=[1], item=delivery)

    async def writer(burst: Any) -> str:
        calls.append((len(acked), [m.message_id for m in burst]))
        if len(calls) == 1:  # the other message reaches the lane while this is written
            await lanes.submit(key, job(meanwhile))
        return f"a reply to {len(burst)}"

    pipeline = _pipeline(mail, writer, approval=approval, lanes=lanes)
    await lanes.submit(key, job(first))
    await asyncio.wait_for(both.wait(), 30)
    return calls


async def _done(work: Any) -> None:
    await work


BOTH = ["<m1@example.com>", "<m2@example.com>"]


@pytest.mark.parametrize("replay", [False, True], ids=["new", "replayed"])
async def test_a_message_queued_while_a_reply_is_written_is_taken_into_it(
    mail: FakeAgentMail, replay: bool
) -> None:
    meanwhile = dataclasses.replace(_delivery(mail, 2, 9), replay=replay)

    calls = await _while_written(mail, meanwhile)

    # written again with it, within the first job: one reply, to the latest
    assert calls == [(0, ["<m1@example.com>"]), (0, BOTH)]
    assert {e.replied_to_message_id for e in mail.outbox} == {"<m2@example.com>"}


async def test_with_approval_on_a_replayed_message_queued_meanwhile_gets_a_burst_of_its_own(
    mail: FakeAgentMail,
) -> None:
    """A replay (a dead letter retried, a catch-up) is not taken into a reply being written:
    its key may end a chain of drafts covered by it, which only its own burst recalls from
    the thread (simulator finding F15, seed 422293163). Its own burst, after the first job,
    supersedes message 1's draft and recalls it."""
    replayed = dataclasses.replace(_delivery(mail, 2, 9), replay=True)

    calls = await _while_written(mail, replayed, approval="always")

    assert calls == [(0, ["<m1@example.com>"]), (1, BOTH)]
    assert mail.outbox == []  # drafts: nothing is sent before a person approves


async def _no_run(job: Job) -> None:  # the test calls process itself
    return None


@pytest.mark.parametrize("held", [False, True], ids=["lane", "held-by-the-reorder-window"])
@pytest.mark.parametrize("owner", [True, False], ids=["still-owner", "fenced"])
async def test_an_event_is_recorded_as_ended_only_by_the_partitions_owner(
    mail: FakeAgentMail, owner: bool, held: bool
) -> None:
    """A worker that lost its partition while it answered (paused past its session) writes
    no outcome for the events: its entry would land after the new owner's and stand for it,
    and a dead letter's retry would be skipped as the duplicate of a success that never
    was (simulator finding F16, seed 426429705). The claim stays; the owner ends it. The
    same on both paths: a lane's record (window 0) and a thread's held events released by
    the reorder window (the router's release, which passes the thread's key)."""

    async def confirm(tp: Any, generation: int) -> bool:  # lost once the reply is sent
        return owner or not mail.outbox

    fence = Fence(confirm, lambda: (TopicPartition("deliveries", 0), 1))
    holds = {"holds": Holds({}, window_ms=2000)} if held else {}
    pipeline = _pipeline(
        mail, lambda burst: "a reply", fence=fence, lanes=Lanes(ack=print), **holds
    )
    delivery = _delivery(mail, 1, 5)
    job = Job(run=_no_run, records=[1], item=delivery)

    key = delivery.envelope.thread_key.encode() if held else None
    if owner:
        await pipeline.process(job, [delivery], key=key)
    else:
        with pytest.raises(Dropped, match="no longer owns partition"):
            await pipeline.process(job, [delivery], key=key)

    raw = pipeline.parts.events[delivery.envelope.dedupe_key.encode()]
    state = EventEntry.from_json(json.loads(raw)).state
    assert state is (EventState.SUCCEEDED if owner else EventState.IN_PROGRESS)


@pytest.mark.parametrize("alone", [True, False], ids=["alone", "with-a-new-message"])
async def test_a_message_whose_reply_failed_before_fails_its_event_when_read_again(
    mail: FakeAgentMail, alone: bool
) -> None:
    """A worker dead-lettered message 1's reply and stopped before recording how its event
    ended; the next owner reads it again, finds its record *failed* and does nothing more.
    The event fails, so the letter's retry is taken (a success would skip it as a duplicate,
    the message never answered: simulator finding F16, seed 429377588), alone or beside a
    new message answered meanwhile."""
    pipeline = _pipeline(mail, lambda burst: "a reply")
    first, second = _delivery(mail, 1, 5), _delivery(mail, 2, 9)
    (inbound,) = await pipeline._inbounds([first], {})
    await pipeline.parts.ledger.put(_record(inbound, ReplyState.FAILED))
    outcomes: dict[str, bool] = {}

    await pipeline.act([first] if alone else [first, second], outcomes)

    assert outcomes[first.envelope.event_id] is False


async def test_a_retry_that_meets_its_event_in_progress_is_dead_lettered_again(
    mail: FakeAgentMail,
) -> None:
    """A dead letter's retry (a replay) whose event another delivery is processing (its
    original, read again after a rebalance) is skipped as in progress: that delivery ends
    as the letter said, and the retry, whose letter the CLI closed, would be lost. It is
    dead-lettered again, ``retry_raced`` (the simulator's finding F27, seed 954867658)."""
    first = _delivery(mail, 1, 5)
    retry = dataclasses.replace(first, position=(0, 9), replay=True)
    pipeline = _pipeline(mail, lambda burst: "a reply")

    claimed = await pipeline.claim([first, retry])

    assert claimed == [first]
    letters = pipeline.parts.dead_letters.letters  # type: ignore[attr-defined]
    assert letters == [("retry_raced", [first.envelope.event_id])]


async def test_a_second_delivery_that_is_no_retry_is_only_skipped(mail: FakeAgentMail) -> None:
    first = _delivery(mail, 1, 5)
    again = dataclasses.replace(first, position=(0, 9))
    pipeline = _pipeline(mail, lambda burst: "a reply")

    claimed = await pipeline.claim([first, again])

    assert claimed == [first]
    assert pipeline.parts.dead_letters.letters == []  # type: ignore[attr-defined]


@pytest.mark.parametrize("replay", [True, False], ids=["retry", "webhook-again"])
async def test_a_delivery_of_an_event_held_already_is_dead_lettered_again_if_a_retry(
    mail: FakeAgentMail, replay: bool
) -> None:
    """With a reorder window, a retry of an event whose delivery is still held (a crash
    after its letter, before the buffer let it go) is a repeat of the held one: dropped, it
    would be lost the same way (F27). A webhook delivered again is only skipped."""
    first = _delivery(mail, 1, 5)
    holds = Holds({}, window_ms=2000)
    acked: list[Any] = []

    class Acks:
        async def ack_now(self, event: Any) -> None:
            acked.append(event)

    pipeline = _pipeline(mail, lambda burst: "a reply", holds=holds, lanes=Acks())
    router = Router(pipeline.parts)
    key = first.envelope.thread_key.encode()
    await router._hold("first", key, first)
    again = dataclasses.replace(first, position=(0, 9), replay=replay)

    await router._hold("again", key, again)

    letters = pipeline.parts.dead_letters.letters  # type: ignore[attr-defined]
    assert letters == ([("retry_raced", [first.envelope.event_id])] if replay else [])
    assert acked == ["first", "again"]


async def test_a_retry_that_meets_a_claim_left_by_a_committed_record_is_processed(
    mail: FakeAgentMail,
) -> None:
    """The claim of message 1's event was left *in progress* by its record at offset 1,
    committed before this worker was given the partition (its outcome, a table write,
    lost while the broker was away): a retry of its letter processes it, where it was
    dead-lettered again, alone, and the messages its reply covered were left in no letter
    (the simulator's finding F37, seed 700010781)."""
    first = _delivery(mail, 1, 5)
    retry = dataclasses.replace(first, position=(0, 9), replay=True)
    pipeline = _pipeline(mail, lambda burst: "a reply", read_from=lambda partition: 4)
    await pipeline.claim([first])  # the original's claim; its outcome never lands

    with capture_logs() as logs:
        claimed = await pipeline.claim([retry])

    assert claimed == [retry]
    assert pipeline.parts.dead_letters.letters == []  # type: ignore[attr-defined]
    assert [e["owner"] for e in logs if "left in progress" in e["event"]] == [[0, 1]]


async def test_a_replay_of_a_failed_event_is_not_logged_as_a_lost_outcome(
    mail: FakeAgentMail,
) -> None:
    first = _delivery(mail, 1, 5)
    retry = dataclasses.replace(first, position=(0, 9), replay=True)
    pipeline = _pipeline(mail, lambda burst: "a reply", read_from=lambda partition: 4)
    await pipeline.claim([first])
    pipeline.finish([first], {first.envelope.event_id: False})  # its outcome landed: failed

    with capture_logs() as logs:
        claimed = await pipeline.claim([retry])

    assert claimed == [retry]
    assert not [e for e in logs if "left in progress" in e["event"]]
