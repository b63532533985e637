"""The trace assembly, from records built by hand: no Kafka."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from typing import Any

from onceonly.ingest import normalise
from onceonly.operations.index.layout import Kind
from onceonly.operations.index.names import of_changelog_key, of_hold
from onceonly.operations.trace import Record, Sources, assemble, render_text, to_json
from onceonly.processors.decisions import record_for
from onceonly.processors.reorder.holds import Delivery, event_key
from onceonly.processors.writer.contract import reply_key
from onceonly.schemas.decision import Stage
from onceonly.schemas.envelope import REPLAY_HEADER, TICK_HEADER, Envelope
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from testkit import payloads

INBOX = "support@agentmail.to"
T0 = 1_764_583_200_000  # ms
MESSAGE = "<m1@example.com>"
KEY = reply_key(INBOX, MESSAGE)


def _envelope(message_id: str = MESSAGE, event_id: str = "evt-1", **kw: Any) -> Envelope:
    payload = payloads.agentmail_received(
        inbox_id=INBOX, thread_id="thr-1", message_id=message_id, event_id=event_id, **kw
    )
    return normalise.agentmail(json.dumps(payload), {}, datetime.fromtimestamp(T0 / 1000, UTC))


def _delivery(envelope: Envelope, offset: int, *, replay: bool = False) -> Record:
    headers = [*envelope.headers(), *([(REPLAY_HEADER, b"r1")] if replay else [])]
    return Record(
        0, offset, T0 + offset, envelope.thread_key.encode(), envelope.encode(), tuple(headers)
    )


def _event(envelope: Envelope, state: str, ms: int, offset: int) -> Record:
    value = json.dumps([state, ms, [0, offset]]).encode()
    return Record(0, 0, ms, envelope.dedupe_key.encode(), value)


def _claimed(envelope: Envelope, offset: int, end: str = "succeeded") -> list[Record]:
    return [
        _event(envelope, "in_progress", T0 + 2000, offset),
        _event(envelope, end, T0 + 2500, offset),
    ]


def _ledger(state: ReplyState, ms: int, **kw: Any) -> Record:
    record = ReplyRecord(
        key=kw.pop("key", KEY),
        inbox_id=INBOX,
        message_id=kw.pop("message_id", MESSAGE),
        thread_key="agentmail:thr-1",
        state=state,
        created_at=datetime.fromtimestamp(ms / 1000, UTC),
        **kw,
    )
    return Record(0, 0, ms, record.key.encode(), record.encode())


def _skip(envelope: Envelope, offset: int, stage: Stage, reason: str, ms: int) -> Record:
    at = datetime.fromtimestamp(ms / 1000, UTC)
    record = record_for(Delivery(envelope, (0, offset)), stage, reason, at)
    return Record(0, 0, ms, envelope.thread_key.encode(), record.encode())


def _answered() -> Sources:
    envelope = _envelope()
    held = {"held": [[T0, "evt-1", T0 + 5, {"position": [0, 0]}]], "up_to": None, "p": 0}
    return Sources(
        deliveries=[_delivery(envelope, 0)],
        events=_claimed(envelope, 0),
        holds=[Record(0, 0, T0 + 5, b"agentmail:thr-1", json.dumps(held).encode())],
        ledger=[
            _ledger(ReplyState.PENDING, T0 + 2100, reply_text="Sure, Friday."),
            _ledger(ReplyState.SENT, T0 + 2400, reply_text="Sure, Friday.", sent_message_id="s1"),
        ],
    )


def test_an_answered_message_shows_its_delivery_its_release_and_the_sent_reply() -> None:
    trace = assemble(MESSAGE, _answered())

    assert trace is not None and trace.matched == "message_id"
    [delivery] = trace.deliveries
    assert (delivery.verdict, delivery.outcome) == ("accepted", "processed")
    assert delivery.held_at == datetime.fromtimestamp((T0 + 5) / 1000, UTC)
    assert delivery.released_at == datetime.fromtimestamp((T0 + 2000) / 1000, UTC)
    assert (trace.outcome, trace.answered, trace.reply_text) == ("answered", True, "Sure, Friday.")
    assert [c.state for c in trace.ledger[0].history] == [ReplyState.PENDING, ReplyState.SENT]


def test_a_delivery_held_in_its_events_own_entry_shows_when_it_was_held() -> None:
    """Each held event is an entry of its own since the simulator's finding F42
    (``holds.event_key``); a buffer written whole is read as before (above)."""
    entry = {"t": T0, "e": "evt-1", "a": T0 + 7, "i": {"position": [0, 0]}}
    tombstone = Record(0, 1, T0 + 2500, event_key(b"agentmail:thr-1", "evt-1"), None)
    held = Record(0, 0, T0 + 7, event_key(b"agentmail:thr-1", "evt-1"), json.dumps(entry).encode())
    sources = dataclasses.replace(_answered(), holds=[held, tombstone])

    trace = assemble(MESSAGE, sources)

    assert trace is not None
    assert trace.deliveries[0].held_at == datetime.fromtimestamp((T0 + 7) / 1000, UTC)
    assert of_hold(held) == of_changelog_key(Kind.THREAD)(_answered().holds[0])


def test_the_event_id_and_the_reply_key_find_the_same_message() -> None:
    by_event = assemble("evt-1", _answered())
    by_key = assemble(KEY, _answered())

    assert by_event is not None and by_key is not None
    assert (by_event.matched, by_key.matched) == ("event_id", "reply_key")
    assert by_event.deliveries == by_key.deliveries
    assert by_event.ledger == by_key.ledger


def test_a_second_delivery_of_the_event_is_a_duplicate_skipped_by_dedupe() -> None:
    envelope = _envelope()
    sources = Sources(
        deliveries=[_delivery(envelope, 0), _delivery(envelope, 1)],
        events=_claimed(envelope, 0),
        decisions=[_skip(envelope, 1, Stage.DEDUPE, "duplicate", T0 + 9000)],
    )

    trace = assemble("evt-1", sources)

    assert trace is not None
    assert [(d.offset, d.verdict, d.verdict_stage) for d in trace.deliveries] == [
        (0, "accepted", None),
        (1, "duplicate", "dedupe"),
    ]
    assert trace.deliveries[1].released_at == datetime.fromtimestamp((T0 + 9000) / 1000, UTC)


def test_the_agents_own_message_is_skipped_with_its_reason() -> None:
    envelope = _envelope(sender=INBOX)
    sources = Sources(
        deliveries=[_delivery(envelope, 0)],
        events=_claimed(envelope, 0),
        decisions=[_skip(envelope, 0, Stage.MESSAGE, "own_message", T0 + 2001)],
    )

    trace = assemble(MESSAGE, sources)

    assert trace is not None and trace.outcome == "skipped: own_message"
    assert trace.deliveries[0].verdict == "accepted"


def test_a_dead_letter_that_names_the_event_is_in_the_trace() -> None:
    envelope = _envelope()
    letter = {"reason": "send_failed: 500", "check": "send_failed", "key": KEY, "attempts": 1}
    letter["envelopes"] = [envelope.to_json()]
    retried = {"kind": "retried", "letters": [0], "at": "2026-12-01T10:00:00+00:00"}
    sources = Sources(
        deliveries=[_delivery(envelope, 0)],
        events=_claimed(envelope, 0, end="failed"),
        ledger=[_ledger(ReplyState.FAILED, T0 + 2400, reply_text="Hi", attempts=1, error="500")],
        dead_letters=[
            Record(0, 0, T0, None, json.dumps(letter).encode()),
            Record(0, 1, T0, None, json.dumps(retried).encode()),
            Record(0, 2, T0, None, json.dumps({"check": "send_failed", "key": "other"}).encode()),
        ],
    )

    trace = assemble("evt-1", sources)

    assert trace is not None and trace.outcome == "dead-lettered and retried"
    assert [(x.id, x.check, x.retried_at) for x in trace.dead_letters] == [
        (0, "send_failed", "2026-12-01T10:00:00+00:00")
    ]
    assert trace.deliveries[0].outcome == "dead-lettered"


def test_a_replayed_delivery_is_marked_as_a_replay() -> None:
    envelope = _envelope()
    sources = Sources(
        deliveries=[_delivery(envelope, 0), _delivery(envelope, 5, replay=True)],
        events=_claimed(envelope, 0),
        decisions=[_skip(envelope, 5, Stage.DEDUPE, "duplicate", T0 + 9000)],
    )

    trace = assemble(MESSAGE, sources)

    assert trace is not None
    assert [(d.replay, d.outcome) for d in trace.deliveries] == [
        (False, "processed"),
        (True, "skipped: duplicate"),
    ]


def test_an_id_no_record_names_has_no_trace() -> None:
    tick = Record(0, 9, T0, None, b"", ((TICK_HEADER, b"1"),))
    sources = Sources(deliveries=[tick, Record(0, 10, T0, None, b"not json")])

    assert assemble("evt-nowhere", sources) is None


def test_a_covered_message_is_answered_by_the_covering_reply() -> None:
    later = reply_key(INBOX, "<m2@example.com>")
    sources = Sources(
        deliveries=[_delivery(_envelope(), 0)],
        ledger=[
            _ledger(ReplyState.COVERED, T0 + 2100, covered_by=later),
            _ledger(
                ReplyState.SENT, T0 + 2200, key=later, message_id="<m2@example.com>", reply_text="B"
            ),
        ],
    )

    trace = assemble(MESSAGE, sources)

    assert trace is not None and trace.reply_text == "B" and trace.answered
    assert trace.outcome.startswith("answered by the reply to a later message")


def test_a_message_whose_deliveries_expired_is_found_in_the_ledger() -> None:
    sources = Sources(ledger=[_ledger(ReplyState.SENT, T0, reply_text="Hi", sent_message_id="s")])

    trace = assemble(MESSAGE, sources)

    assert trace is not None and trace.deliveries == () and trace.answered


def test_the_json_and_the_text_say_the_same_outcome() -> None:
    trace = assemble(MESSAGE, _answered())
    assert trace is not None

    data = json.loads(json.dumps(to_json(trace)))
    text = render_text(trace)

    assert (data["outcome"], data["reply_text"]) == ("answered", "Sure, Friday.")
    assert data["deliveries"][0]["outcome"] == "processed"
    assert MESSAGE in text and "outcome: answered" in text and "Sure, Friday." in text


def test_the_dedupe_key_finds_the_event_as_its_event_id_does() -> None:
    trace = assemble("agentmail:evt-1", _answered())

    assert trace is not None and trace.matched == "event_id" and len(trace.deliveries) == 1


def test_what_the_reply_cost_is_in_the_text_and_the_json() -> None:
    from onceonly.schemas.ledger import Usage

    sources = _answered()
    usage = Usage("gpt-4o-mini", 812, 64)
    sent = _ledger(
        ReplyState.SENT, T0 + 2400, reply_text="Sure, Friday.", sent_message_id="s1", usage=usage
    )
    sources = Sources(sources.deliveries, sources.events, sources.holds, [sources.ledger[0], sent])
    trace = assemble(MESSAGE, sources)
    assert trace is not None

    assert "gpt-4o-mini: 812 in + 64 out tokens" in render_text(trace)
    data = json.loads(json.dumps(to_json(trace)))
    assert data["ledger"][0]["record"]["usage"] == {
        "model": "gpt-4o-mini",
        "input_tokens": 812,
        "output_tokens": 64,
    }
