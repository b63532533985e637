"""The fake AgentMail server's switch that ignores Idempotency-Key (for chaos runs that
count what the caller prevents by itself), driven through the real ``agentmail`` SDK."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import httpx
import pytest
from agentmail import AsyncAgentMail
from agentmail.core.request_options import RequestOptions

from testkit.fakes._server import as_process
from testkit.fakes.agentmail_server import FakeAgentMail

INBOX = "agent@agentmail.to"
NO_RETRY: RequestOptions = {"max_retries": 0}


@pytest.fixture(params=[False, True], ids=["keys-honoured", "keys-ignored"])
async def fake(request: pytest.FixtureRequest) -> AsyncIterator[FakeAgentMail]:
    async with FakeAgentMail(ignore_idempotency_keys=request.param).serving() as server:
        yield server


async def _reply(client: AsyncAgentMail, mid: str, text: str, key: str) -> str:
    sent = await client.inboxes.messages.reply(
        INBOX, mid, text=text, idempotency_key=key, request_options=NO_RETRY
    )
    return str(sent.message_id)


async def test_same_key_sends_once_or_every_time_as_the_switch_says(
    fake: FakeAgentMail, client: AsyncAgentMail
) -> None:
    mid = str(fake.seed_message(INBOX)["message_id"])

    first = await _reply(client, mid, "Thanks!", "k-1")
    second = await _reply(client, mid, "Thanks!", "k-1")
    # another text under the same key: a 409 conflict when keys are honoured
    third_error: Exception | None = None
    try:
        await _reply(client, mid, "Other text", "k-1")
    except Exception as exc:  # the SDK's ConflictError when honoured
        third_error = exc

    if fake.faults.ignore_keys:
        assert first != second
        assert third_error is None
        assert [e.text for e in fake.outbox] == ["Thanks!", "Thanks!", "Other text"]
        # the outbox still shows the key each email was sent with
        assert {e.idempotency_key for e in fake.outbox} == {"k-1"}
    else:
        assert first == second
        assert third_error is not None and "409" in str(third_error)
        assert [e.text for e in fake.outbox] == ["Thanks!"]


async def test_switch_is_a_runtime_fault_and_a_reset_restores_the_constructor_setting(
    fake: FakeAgentMail, client: AsyncAgentMail
) -> None:
    initial = fake.faults.ignore_keys
    async with aiohttp.ClientSession(fake.base_url) as http:
        async with http.post("/_control/faults", json={"ignore_keys": not initial}) as resp:
            assert (await resp.json())["ignore_keys"] is not initial
        async with http.post("/_control/faults", json={"ignore_keys": "yes"}) as resp:
            assert resp.status == 400
        async with http.get("/_control/stats") as resp:
            assert (await resp.json())["faults"]["ignore_keys"] is not initial

    mid = str(fake.seed_message(INBOX)["message_id"])
    await _reply(client, mid, "hi", "k-2")
    await _reply(client, mid, "hi", "k-2")
    assert len(fake.outbox) == (2 if not initial else 1)

    fake.ignore_keys(initial)
    assert fake.faults.ignore_keys is initial
    fake.ignore_keys(not initial)
    fake.reset()
    assert fake.faults.ignore_keys is initial


async def test_ignored_keys_are_not_stored(fake: FakeAgentMail, client: AsyncAgentMail) -> None:
    mid = str(fake.seed_message(INBOX)["message_id"])
    await _reply(client, mid, "hi", "k-3")
    async with (
        aiohttp.ClientSession(fake.base_url) as http,
        http.get("/_control/stats") as resp,
    ):
        assert (await resp.json())["idempotency_keys"] == (0 if fake.faults.ignore_keys else 1)


def test_process_flag_turns_the_switch_on() -> None:
    with as_process("agentmail_server", "--ignore-idempotency-keys") as base_url:
        faults = httpx.get(base_url + "/_control/faults", timeout=5.0).json()
        assert faults["ignore_keys"] is True
