"""The Nylas channel: which notifications are answered, and sends through the real SDK.

The pure decisions first; then :class:`NylasSender` and ``reply_once`` against the local
Nylas server (``testkit/fakes/nylas_server.py``) through the ``nylas`` SDK itself.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from nylas.models.errors import (
    NylasApiError,
    NylasApiErrorResponse,
    NylasApiErrorResponseData,
    NylasSdkTimeoutError,
)
from prometheus_client import CollectorRegistry
from pydantic import SecretStr
from requests.structures import CaseInsensitiveDict

from onceonly.foundation.settings import Settings
from onceonly.ingest import normalise
from onceonly.operations import catchup
from onceonly.processors.exceptions import SendError, SendFailure
from onceonly.processors.mail.nylas.channel import NylasChannel
from onceonly.processors.mail.nylas.dry_run import NylasDryRun
from onceonly.processors.mail.nylas.errors import classify
from onceonly.processors.mail.nylas.messages import (
    find_nylas_reply,
    inbound_from_nylas,
    is_replay,
    own_message,
    reply_subject,
)
from onceonly.processors.mail.nylas.sender import NylasSender, replay_counter
from onceonly.processors.mail.outbox import DryRunOutbox
from onceonly.processors.mail.registry import mail_providers
from onceonly.processors.reply.once import (
    BurstResult,
    Outcome,
    SendPolicy,
    Skip,
    reply_once,
)
from onceonly.processors.writer.contract import Inbound, reply_key
from onceonly.schemas.envelope import Envelope
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from testkit import payloads
from testkit.fakes.ledger import MemoryLedger
from testkit.fakes.nylas_server import FakeNylas
from tests.unit.processors._replying import reply_parts

GRANT = "grant-1"
AGENT = "agent@acme.example"
CUSTOMER = "customer@example.com"
NOW = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def _envelope(
    *,
    event_type: str = "message.created",
    message_id: str = "msg-1",
    thread_id: str = "thread-1",
    notification_id: str | None = None,
    **obj: Any,
) -> Envelope:
    payload = payloads.nylas_message(
        notification_id=notification_id,
        event_type=event_type,
        grant_id=GRANT,
        message_id=message_id,
        thread_id=thread_id,
    )
    payload["data"]["object"].update(obj)
    return normalise.nylas(json.dumps(payload), {}, NOW)


def _api_error(status: int, kind: str, headers: dict[str, str] | None = None) -> NylasApiError:
    return NylasApiError(
        NylasApiErrorResponse("req-1", NylasApiErrorResponseData(type=kind, message="m")),
        status_code=status,
        headers=CaseInsensitiveDict(headers or {}),
    )


# -- pure decisions ------------------------------------------------------------------


@pytest.mark.parametrize(
    "event_type",
    [
        "message.updated",
        "message.opened",
        "thread.replied",
        "message.send_success",
        "grant.expired",
    ],
)
async def test_types_other_than_message_created_are_never_answered(event_type: str) -> None:
    channel = NylasChannel(NylasDryRun(DryRunOutbox()), own_address=AGENT)

    found = await channel.inbound(_envelope(event_type=event_type, **{"from": [{"email": "c@x"}]}))

    assert found is Skip.NOT_RECEIVED


async def test_a_message_created_becomes_an_inbound_keyed_by_grant_and_message() -> None:
    channel = NylasChannel(NylasDryRun(DryRunOutbox()), own_address=AGENT)
    envelope = _envelope(
        **{"from": [{"name": "C", "email": CUSTOMER}], "body": "<p>hi</p>", "date": 1_764_410_000}
    )

    found = await channel.inbound(envelope)

    assert isinstance(found, Inbound)
    assert (found.inbox_id, found.message_id, found.thread_id) == (GRANT, "msg-1", "thread-1")
    assert found.key == reply_key(GRANT, "msg-1")
    assert found.sender == CUSTOMER and found.text == "<p>hi</p>"
    assert found.thread_key == "nylas:thread-1"
    assert found.occurred_at == datetime.fromtimestamp(1_764_410_000, UTC)


async def test_the_agents_own_outbound_mail_is_skipped() -> None:
    channel = NylasChannel(NylasDryRun(DryRunOutbox()), own_address=AGENT)
    mine = _envelope(**{"from": [{"email": AGENT.upper()}]})
    filed_in_sent = _envelope(**{"from": [{"email": "alias@acme.example"}], "folders": ["SENT"]})

    assert await channel.inbound(mine) is Skip.OWN_MESSAGE
    assert await channel.inbound(filed_in_sent) is Skip.OWN_MESSAGE


def test_the_subject_gets_one_re() -> None:
    assert reply_subject("Invoice") == "Re: Invoice"
    assert reply_subject("RE: Invoice") == "RE: Invoice"
    assert reply_subject(None) == "Re:"


def test_own_mail_is_from_the_grants_address_or_in_sent() -> None:
    assert own_message({"from": [{"email": " Agent@ACME.example"}]}, AGENT)
    assert own_message({"from": [{"email": CUSTOMER}], "folders": ["sent"]}, AGENT)
    assert not own_message({"from": [{"email": CUSTOMER}], "folders": ["INBOX"]}, AGENT)
    assert not own_message({"from": [{"email": CUSTOMER}]}, None)


def _headers(**values: str) -> list[dict[str, str]]:
    return [{"name": k.replace("_", "-"), "value": v} for k, v in values.items()]


def test_a_reply_is_found_by_its_in_reply_to() -> None:
    original = {"id": "m1", "date": 100, "headers": _headers(Message_ID="<m1@x>")}
    other_reply = {
        "id": "r0",
        "from": [{"email": AGENT}],
        "headers": _headers(In_Reply_To="<m0@x>"),
    }
    customer = {
        "id": "c1",
        "from": [{"email": CUSTOMER}],
        "headers": _headers(In_Reply_To="<m1@x>"),
    }
    reply = {"id": "r1", "from": [{"email": AGENT}], "headers": _headers(In_Reply_To="<m1@x>")}

    assert find_nylas_reply([other_reply, customer], original, AGENT) is None
    assert find_nylas_reply([other_reply, customer, reply], original, AGENT) == "r1"
    # no Message-ID on the original: the grant's own mail at or after it counts
    bare = {"id": "m1", "date": 100}
    assert find_nylas_reply([{**reply, "date": 99}], bare, AGENT) is None
    assert find_nylas_reply([{**reply, "date": 100}], bare, AGENT) == "r1"


def test_inbound_falls_back_to_the_snippet_and_the_envelope_time() -> None:
    inbound = inbound_from_nylas(
        {"id": "m", "grant_id": GRANT, "snippet": "short", "from": [{"email": CUSTOMER}]},
        thread_key="nylas:t",
        event_id="n1",
        fallback_time=NOW,
    )

    assert inbound.text == "short" and inbound.occurred_at == NOW


@pytest.mark.parametrize(
    ("error", "failure"),
    [
        (_api_error(409, "api.invalid_idempotent_request"), SendFailure.CONFLICT),
        (_api_error(409, "api.concurrent_idempotent_request"), SendFailure.IN_FLIGHT),
        (_api_error(400, "api.invalid_idempotency_key"), SendFailure.REJECTED),
        (_api_error(409, "something_else"), SendFailure.CONFLICT),
        (_api_error(429, "rate_limit_error"), SendFailure.RETRY),
        (_api_error(503, "api.internal_error"), SendFailure.RETRY),
        (_api_error(408, "timeout"), SendFailure.RETRY),
        (_api_error(400, "invalid_request_error"), SendFailure.REJECTED),
        (_api_error(404, "not_found_error"), SendFailure.REJECTED),
        # a cached error is what the key answers for an hour: retrying now cannot help
        (
            _api_error(503, "api.internal_error", {"idempotent-response": "true"}),
            SendFailure.REJECTED,
        ),
        (NylasSdkTimeoutError("http://x", 10), SendFailure.RETRY),
    ],
)
def test_the_sdks_errors_map_to_the_send_policy(error: Exception, failure: SendFailure) -> None:
    assert classify(error).failure is failure


def test_an_unexpected_exception_is_not_swallowed() -> None:
    with pytest.raises(RuntimeError):
        classify(RuntimeError("a bug"))


def test_the_replay_header_is_read_case_insensitively() -> None:
    assert is_replay(CaseInsensitiveDict({"idempotent-response": "true"}))
    assert is_replay({"Idempotent-Response": "TRUE"})
    assert not is_replay({"Idempotent-Response": "false"})
    assert not is_replay(None)


def test_the_channel_is_registered_only_when_nylas_is_configured(tmp_path: Path) -> None:
    base = {"run_dir": tmp_path}
    assert "nylas" not in mail_providers(Settings(**base))  # type: ignore[arg-type]

    dry = mail_providers(
        Settings(nylas_webhook_secret=SecretStr("s"), **base),  # type: ignore[arg-type]
    )
    agentmail, nylas = dry["agentmail"].sender, dry["nylas"].sender
    assert isinstance(nylas, NylasDryRun) and nylas.dry_run
    assert nylas.outbox is agentmail.outbox  # type: ignore[attr-defined]  # one outbox

    real = mail_providers(
        Settings(nylas_api_key=SecretStr("k"), nylas_grant_email=AGENT, **base),  # type: ignore[arg-type]
        registry=CollectorRegistry(),
    )["nylas"]
    assert isinstance(real, NylasChannel) and isinstance(real.sender, NylasSender)
    assert real.own_address == AGENT


def test_settings_read_the_nylas_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NYLAS_API_KEY", "nyk_test")
    monkeypatch.setenv("ONCEONLY_NYLAS_API_URI", "http://127.0.0.1:9")
    monkeypatch.setenv("ONCEONLY_NYLAS_GRANT_EMAIL", AGENT)

    settings = Settings.from_env()

    assert settings.nylas_api_key is not None
    assert settings.nylas_api_key.get_secret_value() == "nyk_test"
    assert settings.nylas_api_uri == "http://127.0.0.1:9"
    assert settings.nylas_grant_email == AGENT


def test_the_api_uri_defaults_to_the_us_region(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ONCEONLY_NYLAS_API_URI", raising=False)

    assert Settings.from_env().nylas_api_uri == "https://api.us.nylas.com"


async def test_a_catch_up_envelope_is_what_ingest_makes_and_leaves_big_bodies_out() -> None:
    channel = NylasChannel(NylasDryRun(DryRunOutbox()), own_address=AGENT)
    message = {
        "id": "m1",
        "thread_id": "t1",
        "date": 1_764_410_000,
        "from": [{"email": CUSTOMER}],
        "body": "hi",
    }

    async def envelope(message: dict[str, Any]) -> Envelope:
        missed = await channel.missed(GRANT, message)
        assert missed is not None
        return catchup.envelope_for("nylas", missed, NOW)

    small = await envelope(message)
    big = await envelope({**message, "body": "x" * (300 * 1024)})

    assert (small.provider, small.event_type, small.thread_key) == (
        "nylas",
        "message.created",
        "nylas:t1",
    )
    assert (small.account_id, small.message_id) == (GRANT, "m1")
    assert small.event_id == (await envelope(message)).event_id  # deterministic
    assert big.truncated and big.event_type == "message.created.truncated"
    assert "body" not in big.payload()["data"]["object"]
    assert await channel.missed(GRANT, {**message, "from": [{"email": AGENT}]}) is None


# -- against the local Nylas server, through the SDK ---------------------------------


@pytest.fixture
async def nylas() -> AsyncIterator[FakeNylas]:
    async with FakeNylas().serving() as fake:
        fake.seed_grant(GRANT, AGENT)
        yield fake


class Harness:
    def __init__(self, nylas: FakeNylas, *, own_address: str | None = None) -> None:
        self.nylas = nylas
        self.ledger = MemoryLedger()
        self.registry = CollectorRegistry()
        self.sender = NylasSender(
            "test-key",
            api_uri=nylas.base_url,
            timeout_s=5,
            own_address=own_address,
            replays=replay_counter(self.registry),
        )
        self.channel = NylasChannel(self.sender, own_address=own_address)
        self.writes: list[int] = []
        self.dead: list[tuple[ReplyRecord, str]] = []

    def writer(self, burst: Sequence[Inbound]) -> str:
        self.writes.append(len(burst))
        return f"Thanks for your {len(burst)} message(s)."

    async def dead_letter(self, record: ReplyRecord, reason: str, burst: Any = ()) -> None:
        self.dead.append((record, reason))

    def seed(self, message_id: str, thread: str = "thread-1", **kw: Any) -> dict[str, Any]:
        return self.nylas.seed_message(GRANT, message_id=message_id, thread_id=thread, **kw)

    async def inbound(self, message_id: str, thread: str = "thread-1", **kw: Any) -> Inbound:
        found = await self.channel.inbound(_envelope(message_id=message_id, thread_id=thread, **kw))
        assert isinstance(found, Inbound), found
        return found

    async def run(
        self, burst: Sequence[Inbound], attempts: int = 3, backoff_s: float = 0.01
    ) -> BurstResult:
        policy = SendPolicy(
            attempts=attempts, backoff_initial_s=backoff_s, backoff_max_s=backoff_s * 5
        )
        parts = reply_parts(
            self.ledger,
            self.sender,
            self.writer,
            self.dead_letter,
            lambda: datetime.now(UTC),
            policy=policy,
            channel="nylas",
        )
        return await reply_once(burst, parts)

    def replays(self) -> float:
        return self.registry.get_sample_value("onceonly_nylas_replays_total") or 0.0


def _record(message_id: str, text: str = "the reply", **kw: Any) -> ReplyRecord:
    values: dict[str, Any] = {
        "key": reply_key(GRANT, message_id),
        "inbox_id": GRANT,
        "message_id": message_id,
        "thread_key": "nylas:thread-1",
        "state": ReplyState.PENDING,
        "created_at": datetime.now(UTC),
        "reply_text": text,
        "channel": "nylas",
    }
    values.update(kw)
    return ReplyRecord(**values)


async def test_a_reply_carries_the_key_and_replies_to_the_sender(nylas: FakeNylas) -> None:
    harness = Harness(nylas)
    harness.seed("m1", from_=[("Customer", CUSTOMER)], subject="Invoice")

    sent = await harness.sender.reply(_record("m1", "Here it is."))

    [email] = nylas.outbox
    assert email.sent_message_id == sent
    assert email.idempotency_key == reply_key(GRANT, "m1")
    assert (email.reply_to_message_id, email.to, email.subject, email.body) == (
        "m1",
        (CUSTOMER,),
        "Re: Invoice",
        "Here it is.",
    )
    assert email.thread_id == "thread-1"


async def test_the_same_send_again_is_a_replay_not_an_email(nylas: FakeNylas) -> None:
    harness = Harness(nylas)
    harness.seed("m1")

    first = await harness.sender.reply(_record("m1"))
    second = await harness.sender.reply(_record("m1"))

    assert first == second
    assert len(nylas.outbox) == 1
    assert harness.sender.replay_count == 1 and harness.replays() == 1.0


async def test_the_key_with_another_payload_is_a_conflict(nylas: FakeNylas) -> None:
    harness = Harness(nylas)
    harness.seed("m1")
    await harness.sender.reply(_record("m1", "first text"))

    with pytest.raises(SendError) as caught:
        await harness.sender.reply(_record("m1", "other text"))

    assert caught.value.failure is SendFailure.CONFLICT and caught.value.status == 409
    assert "api.invalid_idempotent_request" in str(caught.value)
    assert len(nylas.outbox) == 1


async def test_a_send_while_the_first_is_in_flight_backs_off(nylas: FakeNylas) -> None:
    harness = Harness(nylas)
    harness.seed("m1")
    nylas.faults.send_delay_s = 1.0

    results = await asyncio.gather(
        harness.sender.reply(_record("m1")),
        harness.sender.reply(_record("m1")),
        return_exceptions=True,
    )

    errors = [r for r in results if isinstance(r, SendError)]
    assert len(errors) == 1 and errors[0].failure is SendFailure.IN_FLIGHT
    assert "api.concurrent_idempotent_request" in str(errors[0])
    assert len(nylas.outbox) == 1


async def test_an_overlong_key_is_a_bug_not_a_retry(nylas: FakeNylas) -> None:
    harness = Harness(nylas)
    harness.seed("m1")
    request = {"reply_to_message_id": "m1", "to": [{"email": CUSTOMER}], "body": "x"}

    with pytest.raises(SendError) as caught:  # what the server says, through the SDK
        await harness.sender._call(
            harness.sender.client.messages.send,
            GRANT,
            request,
            overrides={"headers": {"Idempotency-Key": "k" * 257}},
        )
    assert caught.value.failure is SendFailure.REJECTED
    assert "api.invalid_idempotency_key" in str(caught.value)

    with pytest.raises(SendError) as ours:  # and the sender does not even try
        await harness.sender.reply(_record("m1", key="k" * 257))
    assert ours.value.failure is SendFailure.REJECTED
    assert nylas.outbox == []


async def test_two_concurrent_reply_onces_send_one_email(nylas: FakeNylas) -> None:
    harness = Harness(nylas)
    harness.seed("m1")
    inbound = await harness.inbound("m1")
    nylas.faults.send_delay_s = 0.3
    other = Harness(nylas)  # a second worker, its own ledger view: only the key protects

    results = await asyncio.gather(
        harness.run([inbound], 10, backoff_s=0.2), other.run([inbound], 10, backoff_s=0.2)
    )

    assert {r.outcome for r in results} == {Outcome.SENT}
    assert len(nylas.outbox) == 1
    assert results[0].sent_message_id == results[1].sent_message_id


async def test_a_lost_response_is_retried_with_the_same_key_and_counted_a_replay(
    nylas: FakeNylas,
) -> None:
    harness = Harness(nylas)
    harness.seed("m1")
    nylas.lose_response_next(1)

    result = await harness.run([await harness.inbound("m1")])

    assert result.outcome is Outcome.SENT
    assert len(nylas.outbox) == 1 and harness.replays() == 1.0
    assert nylas.send_keys == [reply_key(GRANT, "m1")] * 2


async def test_a_cached_server_error_is_dead_lettered_not_hammered(nylas: FakeNylas) -> None:
    harness = Harness(nylas)
    harness.seed("m1")
    nylas.fail_next(1, 503)

    result = await harness.run([await harness.inbound("m1")], attempts=5)

    assert result.outcome is Outcome.FAILED
    assert len(nylas.send_keys) == 2  # the 503, then its cached replay: no third try
    [(record, reason)] = harness.dead
    assert record.state is ReplyState.FAILED and "idempotency cache" in reason
    assert nylas.outbox == []


async def test_a_key_older_than_an_hour_sends_again_at_nylas(nylas: FakeNylas) -> None:
    """Why a stale pending record is reconciled first: Nylas forgets the key after 1 h."""
    harness = Harness(nylas)
    harness.seed("m1")
    await harness.sender.reply(_record("m1"))

    nylas.advance_clock(3601)
    await harness.sender.reply(_record("m1"))

    assert len(nylas.outbox) == 2


async def test_a_stale_pending_record_whose_reply_is_in_the_thread_sends_nothing(
    nylas: FakeNylas,
) -> None:
    harness = Harness(nylas)
    harness.seed("m0")
    harness.seed("m1")
    harness.seed("r0", from_=[AGENT], folders=["SENT"], in_reply_to="m0")  # another reply
    harness.seed("r1", from_=[AGENT], folders=["SENT"], in_reply_to="m1")
    harness.seed("c2", in_reply_to="r1")  # the customer answered after it
    stale = _record("m1", created_at=datetime.now(UTC) - timedelta(hours=2))
    harness.ledger.records[stale.key] = stale

    result = await harness.run([await harness.inbound("m1")])

    assert result.outcome is Outcome.ALREADY and result.sent_message_id == "r1"
    assert harness.ledger.records[stale.key].state is ReplyState.SENT
    assert nylas.outbox == [] and harness.writes == []


async def test_a_stale_pending_record_without_a_reply_sends_its_stored_text(
    nylas: FakeNylas,
) -> None:
    harness = Harness(nylas)
    harness.seed("m1")
    harness.seed("r1", from_=[AGENT], folders=["SENT"], in_reply_to="m1")  # not to m2
    harness.seed("m2")
    stale = _record("m2", "stored text", created_at=datetime.now(UTC) - timedelta(hours=2))
    harness.ledger.records[stale.key] = stale

    result = await harness.run([await harness.inbound("m2")])

    assert result.outcome is Outcome.SENT
    assert [e.body for e in nylas.outbox] == ["stored text"]
    assert harness.writes == []


async def test_a_truncated_event_is_fetched_before_the_writer_sees_it(nylas: FakeNylas) -> None:
    harness = Harness(nylas)
    harness.seed("big", body="the whole body, from the API")

    inbound = await harness.inbound(
        "big", event_type="message.created.truncated", **{"from": [{"email": CUSTOMER}]}
    )

    assert inbound.text == "the whole body, from the API"
    assert nylas.request_counts["find_message"] == 1


async def test_the_grants_own_address_is_read_from_the_grant_once(nylas: FakeNylas) -> None:
    harness = Harness(nylas)  # nothing configured
    harness.seed("own", from_=[AGENT])
    harness.seed("theirs")

    own = await harness.channel.inbound(_envelope(message_id="own", **{"from": [{"email": AGENT}]}))
    theirs = await harness.channel.inbound(
        _envelope(message_id="theirs", **{"from": [{"email": CUSTOMER}]})
    )

    assert own is Skip.OWN_MESSAGE and isinstance(theirs, Inbound)
    assert nylas.request_counts["find_grant"] == 1


async def test_a_burst_of_one_thread_gets_one_reply_to_the_latest(nylas: FakeNylas) -> None:
    harness = Harness(nylas, own_address=AGENT)
    for i in range(3):
        harness.seed(f"b{i}")
    burst = [
        await harness.inbound(f"b{i}", **{"from": [{"email": CUSTOMER}], "date": 1000 + i})
        for i in (2, 0, 1)
    ]

    result = await harness.run(burst)

    [email] = nylas.outbox
    assert result.outcome is Outcome.SENT and email.reply_to_message_id == "b2"
    assert harness.ledger.records[reply_key(GRANT, "b0")].state is ReplyState.COVERED
    assert harness.writes == [3]


async def test_catch_up_feeds_the_unanswered_messages_only(nylas: FakeNylas) -> None:
    harness = Harness(nylas)
    old = harness.seed("old", date=datetime(2026, 1, 1, tzinfo=UTC).timestamp())
    harness.seed("answered", thread="t-a")
    harness.seed("reply", thread="t-a", from_=[AGENT], folders=["SENT"], in_reply_to="answered")
    harness.seed("missed", thread="t-m")
    answered = catchup.Answered.of([_record("answered").with_state(ReplyState.SENT)])
    fed: list[Envelope] = []

    async def feed(envelope: Envelope) -> None:
        fed.append(envelope)

    summary = await catchup.catch_up(
        harness.channel, GRANT, datetime(2026, 6, 1, tzinfo=UTC), answered=answered, feed=feed
    )

    assert old["id"] not in {e.message_id for e in fed}
    assert [e.message_id for e in fed] == ["missed"]  # the answered one is not fed
    assert summary.found == 3 and summary.skipped_sent_by_agent == 1
    assert summary.skipped_answered == 1 and summary.fed == [reply_key(GRANT, "missed")]
    assert all(e.provider == "nylas" and e.event_type == "message.created" for e in fed)


async def test_catch_up_lists_a_grants_messages_oldest_first_across_pages(
    nylas: FakeNylas,
) -> None:
    # Nylas lists newest first; catch-up feeds in the listing's order, so a thread's older
    # message would reach the worker after its newer one, past any reorder window
    harness = Harness(nylas)
    start = datetime(2026, 6, 2, tzinfo=UTC).timestamp()
    for n in range(250):  # two pages of 200
        harness.seed(f"m{n:03}", thread=f"t{n % 7}", date=start + 60 * n)

    listed = [
        m["id"]
        async for m in harness.sender.messages_since(GRANT, datetime(2026, 6, 1, tzinfo=UTC))
    ]

    assert listed == [f"m{n:03}" for n in range(250)]


async def test_a_fetch_that_fails_is_a_send_error(nylas: FakeNylas) -> None:
    harness = Harness(nylas)

    with pytest.raises(SendError) as caught:
        await harness.sender.fetch(GRANT, "no-such-message")

    assert caught.value.failure is SendFailure.REJECTED and caught.value.status == 404


async def test_a_notification_without_a_message_object_is_skipped_not_a_crash() -> None:
    channel = NylasChannel(NylasDryRun(DryRunOutbox()), own_address=AGENT)
    body = json.dumps({"id": "n1", "type": "message.created", "time": 1, "data": "oops"})

    assert await channel.inbound(normalise.nylas(body, {}, NOW)) is Skip.NOT_RECEIVED


async def test_reconciling_a_message_nylas_no_longer_has_finds_no_reply(nylas: FakeNylas) -> None:
    harness = Harness(nylas)

    assert await harness.sender.find_reply(_record("deleted")) is None


async def test_a_resend_after_a_restart_is_the_same_payload_whatever_the_event_said(
    nylas: FakeNylas,
) -> None:
    first = Harness(nylas)
    first.seed("m1", from_=[("Customer", CUSTOMER)])
    await first.inbound("m1", **{"from": [{"email": CUSTOMER, "name": "C. from the event"}]})
    await first.sender.reply(_record("m1"))

    restarted = Harness(nylas)  # nothing remembered: the message is fetched
    await restarted.sender.reply(_record("m1"))

    assert len(nylas.outbox) == 1 and restarted.replays() == 1.0
