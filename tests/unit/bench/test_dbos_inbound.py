"""What the DBOS app reads of a record: the message and the idempotency key onceonly uses."""

from __future__ import annotations

import json

from bench._dbos_inbound import Inbound, parse
from bench._proc_records import thread_records
from onceonly.processors.writer.contract import reply_key


def test_the_dbos_apps_key_is_onceonlys_reply_key() -> None:
    inbound = Inbound("support-3@agentmail.to", "<abc/def?x@mail.example.com>", None)
    assert inbound.key == reply_key(inbound.inbox_id, inbound.message_id)


def test_it_reads_the_message_of_an_envelope_as_ingest_produces_it() -> None:
    [(message_id, (_key, value, _headers))] = thread_records("t", [7])
    inbound = parse(value)
    assert inbound is not None
    assert inbound.message_id == message_id == "<t-000007@mail.example.com>"
    assert inbound.inbox_id == "support-7@agentmail.to"
    assert inbound.text and "onboarding call" in inbound.text


def test_any_other_event_is_not_a_message_to_answer() -> None:
    [(_id, (_key, value, _headers))] = thread_records("t", [0])
    envelope = json.loads(value)
    envelope["event_type"] = "message.sent"
    assert parse(json.dumps(envelope).encode()) is None
    assert parse(None) is None
