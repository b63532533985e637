"""The fake AgentMail server, driven through the real ``agentmail`` SDK.

Every reply passes ``request_options={"max_retries": 0}`` unless the test is about
the SDK's own retries: the SDK retries 408/409/429/5xx twice by default, with
1 s / 2 s backoff, which would hide the fake's answers and slow the suite.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import aiohttp
import httpx
import pytest
from agentmail import AgentMail, AsyncAgentMail
from agentmail.core.api_error import ApiError
from agentmail.core.request_options import RequestOptions
from agentmail.errors import ConflictError, NotFoundError

from testkit.fakes._server import as_process
from testkit.fakes.agentmail_server import DEFAULT_KEY_TTL_S, FakeAgentMail

INBOX = "agent@agentmail.to"
NO_RETRY: RequestOptions = {"max_retries": 0}
T0 = 1_700_000_000.0


class ManualClock:
    """Injectable clock: epoch seconds that only move when the test says so."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _thanks(client: AsyncAgentMail, message_id: str, text: str = "Thanks!") -> Awaitable[Any]:
    """The reply call most tests make: with key k-1, no retries of the SDK's own."""
    return client.inboxes.messages.reply(
        INBOX, message_id, text=text, idempotency_key="k-1", request_options=NO_RETRY
    )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def fake(clock: ManualClock) -> AsyncIterator[FakeAgentMail]:
    async with FakeAgentMail(clock=clock).serving() as server:
        yield server


@pytest.fixture
def received(fake: FakeAgentMail) -> dict[str, object]:
    return fake.seed_message(INBOX, from_="Jane <jane@example.com>", subject="Question")


def _dt(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s, tz=UTC)


# --------------------------------------------------------------------------- reply


async def test_same_key_twice_sends_one_email_and_replays_message_id(
    fake: FakeAgentMail, client: AsyncAgentMail, received: dict[str, object]
) -> None:
    mid = str(received["message_id"])
    first = await _thanks(client, mid)
    second = await _thanks(client, mid)

    assert second.message_id == first.message_id
    assert second.thread_id == first.thread_id
    assert [e.sent_message_id for e in fake.outbox] == [first.message_id]
    assert fake.outbox[0].idempotency_key == "k-1"
    assert fake.outbox[0].replied_to_message_id == mid


async def test_same_key_with_different_text_raises_conflict_error(
    fake: FakeAgentMail, client: AsyncAgentMail, received: dict[str, object]
) -> None:
    mid = str(received["message_id"])
    await _thanks(client, mid)

    with pytest.raises(ConflictError) as caught:
        await _thanks(client, mid, text="Something else")

    assert caught.value.status_code == 409
    assert caught.value.body.name == "IdempotencyConflict"
    assert len(fake.outbox) == 1


async def test_same_key_while_first_call_in_flight_gets_distinct_409(
    fake: FakeAgentMail, client: AsyncAgentMail, received: dict[str, object]
) -> None:
    mid = str(received["message_id"])
    fake.faults.send_delay_s = 0.3
    first = asyncio.create_task(_thanks(client, mid))
    await asyncio.sleep(0.1)

    with pytest.raises(ConflictError) as caught:
        await _thanks(client, mid)

    assert caught.value.body.name == "IdempotencyInFlight"
    assert (await first).message_id == fake.outbox[0].sent_message_id
    assert len(fake.outbox) == 1


async def test_lost_response_raises_api_error_500_but_email_was_sent(
    fake: FakeAgentMail, client: AsyncAgentMail, received: dict[str, object]
) -> None:
    fake.lose_response_next(1)

    with pytest.raises(ApiError) as caught:
        await _thanks(client, str(received["message_id"]))

    assert caught.value.status_code == 500
    assert len(fake.outbox) == 1


async def test_retry_after_lost_response_replays_without_second_email(
    fake: FakeAgentMail, client: AsyncAgentMail, received: dict[str, object]
) -> None:
    mid = str(received["message_id"])
    fake.lose_response_next(1)
    with pytest.raises(ApiError):
        await _thanks(client, mid)

    retry = await _thanks(client, mid)

    assert [e.sent_message_id for e in fake.outbox] == [retry.message_id]


async def test_sdk_default_retries_recover_a_lost_response_with_the_same_key(
    fake: FakeAgentMail, client: AsyncAgentMail, received: dict[str, object]
) -> None:
    fake.lose_response_next(1)

    sent = await client.inboxes.messages.reply(  # default max_retries=2, ~1 s backoff
        INBOX, str(received["message_id"]), text="Thanks!", idempotency_key="k-1"
    )

    assert fake.request_counts["reply"] == 2
    assert [e.sent_message_id for e in fake.outbox] == [sent.message_id]


async def test_injected_failure_sends_nothing_and_releases_the_key(
    fake: FakeAgentMail, client: AsyncAgentMail, received: dict[str, object]
) -> None:
    mid = str(received["message_id"])
    fake.fail_next(1, status=503)
    with pytest.raises(ApiError) as caught:
        await _thanks(client, mid)
    assert caught.value.status_code == 503
    assert fake.outbox == []

    await _thanks(client, mid)

    assert len(fake.outbox) == 1


async def test_client_timeout_does_not_stop_the_send(
    fake: FakeAgentMail, received: dict[str, object]
) -> None:
    fake.set_latency(0.4)
    async with httpx.AsyncClient(timeout=0.1) as http:
        impatient = AsyncAgentMail(api_key="k", environment=fake.environment, httpx_client=http)
        with pytest.raises(httpx.TimeoutException):
            await impatient.inboxes.messages.reply(
                INBOX,
                str(received["message_id"]),
                text="Thanks!",
                idempotency_key="k-1",
                request_options=NO_RETRY,
            )

    for _ in range(50):
        if fake.outbox:
            break
        await asyncio.sleep(0.05)
    assert len(fake.outbox) == 1


async def test_reply_to_unknown_message_raises_not_found(
    fake: FakeAgentMail, client: AsyncAgentMail
) -> None:
    with pytest.raises(NotFoundError):
        await client.inboxes.messages.reply(
            INBOX, "<nope@example.com>", text="hi", idempotency_key="k", request_options=NO_RETRY
        )
    assert fake.outbox == []


# --------------------------------------------------------------------------- key TTL


@pytest.mark.parametrize(
    ("later_s", "replayed"),
    [(DEFAULT_KEY_TTL_S + 1, False), (DEFAULT_KEY_TTL_S - 1, True)],
    ids=["past its ttl: treated as new", "just inside its ttl: still replays"],
)
async def test_a_key_replays_only_within_its_ttl(
    fake: FakeAgentMail,
    client: AsyncAgentMail,
    received: dict[str, object],
    clock: ManualClock,
    later_s: float,
    replayed: bool,
) -> None:
    mid = str(received["message_id"])
    first = await _thanks(client, mid)
    clock.now += later_s

    second = await _thanks(client, mid)

    assert (second.message_id == first.message_id) is replayed
    assert len(fake.outbox) == (1 if replayed else 2)


# --------------------------------------------------------------------------- reads


async def test_get_message_returns_seeded_fields(
    client: AsyncAgentMail, received: dict[str, object]
) -> None:
    msg = await client.inboxes.messages.get(INBOX, str(received["message_id"]))

    assert msg.from_ == "Jane <jane@example.com>"
    assert msg.labels == ["received"]
    assert msg.text == "Hello there"
    assert msg.timestamp == _dt(T0)


async def test_list_messages_pages_newest_first_with_page_token(
    fake: FakeAgentMail, client: AsyncAgentMail
) -> None:
    ids = [fake.seed_message(INBOX, timestamp=T0 + i)["message_id"] for i in range(5)]

    seen: list[str] = []
    pages = 0
    token: str | None = None
    while True:
        page = await client.inboxes.messages.list(INBOX, limit=2, page_token=token)
        pages += 1
        seen += [m.message_id for m in page.messages]
        token = page.next_page_token
        if token is None:
            break

    assert pages == 3
    assert seen == list(reversed(ids))


async def test_list_messages_after_is_inclusive_and_ascending_orders_oldest_first(
    fake: FakeAgentMail, client: AsyncAgentMail
) -> None:
    ids = [fake.seed_message(INBOX, timestamp=T0 + 10 * i)["message_id"] for i in range(5)]

    page = await client.inboxes.messages.list(INBOX, after=_dt(T0 + 20), ascending=True)

    assert [m.message_id for m in page.messages] == ids[2:]
    assert page.count == 3


async def test_list_messages_labels_filter_keeps_only_sent(
    fake: FakeAgentMail, client: AsyncAgentMail, received: dict[str, object]
) -> None:
    sent = await client.inboxes.messages.reply(
        INBOX, str(received["message_id"]), text="Thanks!", request_options=NO_RETRY
    )

    page = await client.inboxes.messages.list(INBOX, labels=["sent"])

    assert [m.message_id for m in page.messages] == [sent.message_id]
    assert page.messages[0].in_reply_to == received["message_id"]


async def test_get_thread_shows_sent_reply_with_in_reply_to(
    fake: FakeAgentMail, client: AsyncAgentMail, received: dict[str, object], clock: ManualClock
) -> None:
    clock.now += 60
    sent = await client.inboxes.messages.reply(
        INBOX, str(received["message_id"]), text="Thanks!", request_options=NO_RETRY
    )

    thread = await client.inboxes.threads.get(INBOX, str(received["thread_id"]))

    assert [m.message_id for m in thread.messages] == [received["message_id"], sent.message_id]
    reply = thread.messages[1]
    assert reply.labels == ["sent"]
    assert reply.in_reply_to == received["message_id"]
    assert reply.to == ["Jane <jane@example.com>"]
    assert thread.message_count == 2
    assert thread.last_message_id == sent.message_id


async def test_message_id_containing_slash_must_be_percent_encoded_by_the_caller(
    fake: FakeAgentMail, client: AsyncAgentMail
) -> None:
    mid = "<CAJ+ab/cd==@mail.gmail.com>"
    fake.seed_message(INBOX, message_id=mid)

    with pytest.raises(NotFoundError):  # the SDK puts the raw "/" in the URL path
        await client.inboxes.messages.get(INBOX, mid)
    msg = await client.inboxes.messages.get(INBOX, quote(mid, safe=""))

    assert msg.message_id == mid


async def test_webhook_enabled_flag_is_settable(
    fake: FakeAgentMail, client: AsyncAgentMail
) -> None:
    fake.seed_webhook("wh_1", enabled=True)
    assert (await client.webhooks.get("wh_1")).enabled is True

    fake.set_webhook_enabled("wh_1", False)

    assert (await client.webhooks.get("wh_1")).enabled is False


# --------------------------------------------------------------------------- control API


async def test_control_api_seeds_injects_faults_and_reads_outbox(
    fake: FakeAgentMail, client: AsyncAgentMail
) -> None:
    async with aiohttp.ClientSession(fake.base_url) as http:
        async with http.post(
            "/_control/seed",
            json={"messages": [{"inbox_id": INBOX, "message_id": "<m1@x>", "from": "a@x"}]},
        ) as resp:
            assert resp.status == 200
        async with http.post("/_control/faults", json={"lose_response_next": 1}) as resp:
            assert (await resp.json())["lose_remaining"] == 1

        with pytest.raises(ApiError):
            await client.inboxes.messages.reply(
                INBOX, "<m1@x>", text="hi", idempotency_key="k", request_options=NO_RETRY
            )

        async with http.get("/_control/outbox") as resp:
            outbox = await resp.json()
    assert outbox["count"] == 1
    assert outbox["outbox"][0]["replied_to_message_id"] == "<m1@x>"
    assert outbox["outbox"][0]["idempotency_key"] == "k"


async def test_thread_reads_fail_as_many_times_as_the_control_api_says(
    fake: FakeAgentMail, client: AsyncAgentMail, received: dict[str, object]
) -> None:
    thread_id = str(received["thread_id"])
    async with (
        aiohttp.ClientSession(fake.base_url) as http,
        http.post("/_control/faults", json={"thread_fail_next": 1}) as resp,
    ):
        assert (await resp.json())["thread_fail_remaining"] == 1

    with pytest.raises(ApiError) as failed:
        await client.inboxes.threads.get(INBOX, thread_id, request_options=NO_RETRY)
    thread = await client.inboxes.threads.get(INBOX, thread_id, request_options=NO_RETRY)

    assert failed.value.status_code == 503
    assert thread.thread_id == thread_id


async def test_control_reset_clears_messages_and_outbox(
    fake: FakeAgentMail, client: AsyncAgentMail, received: dict[str, object]
) -> None:
    await client.inboxes.messages.reply(
        INBOX, str(received["message_id"]), text="hi", request_options=NO_RETRY
    )

    async with (
        aiohttp.ClientSession(fake.base_url) as http,
        http.post("/_control/reset") as resp,
    ):
        assert resp.status == 200

    assert fake.outbox == []
    assert fake.messages(INBOX) == []


async def test_control_webhook_enabled_and_clock(
    fake: FakeAgentMail, client: AsyncAgentMail
) -> None:
    async with aiohttp.ClientSession(fake.base_url) as http:
        async with http.post(
            "/_control/webhook-enabled", json={"webhook_id": "wh_9", "enabled": False}
        ) as resp:
            assert resp.status == 200
        async with http.post("/_control/clock", json={"advance_s": 30}) as resp:
            assert (await resp.json())["now"] == T0 + 30

    assert (await client.webhooks.get("wh_9")).enabled is False


# --------------------------------------------------------------------------- sync / process


@pytest.fixture
def threaded_fake() -> Iterator[FakeAgentMail]:
    with FakeAgentMail().serving_in_thread() as server:
        yield server


def test_sync_client_against_fake_in_a_thread(threaded_fake: FakeAgentMail) -> None:
    msg = threaded_fake.seed_message(INBOX)
    client = AgentMail(api_key="k", environment=threaded_fake.environment)

    sent = client.inboxes.messages.reply(
        INBOX, str(msg["message_id"]), text="hi", idempotency_key="k", request_options=NO_RETRY
    )

    assert [e.sent_message_id for e in threaded_fake.outbox] == [sent.message_id]


def test_runs_as_a_separate_process_and_prints_its_base_url() -> None:
    with as_process("agentmail_server") as base_url:
        assert base_url.startswith("http://127.0.0.1:")
        seeded = httpx.post(
            f"{base_url}/_control/seed", json={"inbox_id": INBOX, "message_id": "<p1@x>"}
        ).json()
        assert seeded["messages"][0]["message_id"] == "<p1@x>"

        from agentmail import AgentMailEnvironment

        env = AgentMailEnvironment(http=base_url, websockets=base_url.replace("http", "ws"))
        client = AgentMail(api_key="k", environment=env)
        sent = client.inboxes.messages.reply(
            INBOX, "<p1@x>", text="hi", idempotency_key="k", request_options=NO_RETRY
        )

        outbox = httpx.get(f"{base_url}/_control/outbox").json()
        assert [e["sent_message_id"] for e in outbox["outbox"]] == [sent.message_id]
