"""A property through the real stack: validly signed deliveries of every provider with odd
but JSON-valid shapes go through a real ingest process, the broker and a real worker.

For every one, ingest answers 204 or a 4xx (never a 5xx); the worker never exits; and
every accepted record ends: its dedupe entry says *succeeded* (answered, skipped or
recorded) or *failed* with a dead letter naming it. Records written straight to the topic
that ingest would never write end as dead letters too.
"""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devstack.ports import free_port
from onceonly.schemas.envelope import Envelope
from testkit import payloads, signing
from testkit.processes import Supervised
from tests.conftest import consume_all
from tests.integration.workers import Stack, until, worker_env

pytestmark = pytest.mark.integration

ODD: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=300)
    | st.sampled_from(["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59Z", "", "not a date"]),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)

BASES: dict[str, Callable[[], dict[str, Any]]] = {
    "agentmail": lambda: payloads.agentmail_received(inbox_id="odd@agentmail.to"),
    "nylas": payloads.nylas_message,
    "stripe": payloads.stripe_event,
    "github": payloads.github_issue,
    "standard/crm": payloads.standard_event,
}


@st.composite
def odd_deliveries(draw: st.DrawFn) -> tuple[str, bytes]:
    """A provider and a body: its usual payload with fields replaced by odd values, at the
    top or one level down (the ids are kept, so most deliveries are still distinct)."""
    provider = draw(st.sampled_from(sorted(BASES)))
    payload = BASES[provider]()
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        target = payload
        key = draw(st.sampled_from(sorted(k for k in payload if k not in ("event_id", "id"))))
        if isinstance(target[key], dict) and target[key] and draw(st.booleans()):
            target = target[key]
            key = draw(st.sampled_from(sorted(target)))
        target[key] = draw(ODD)
    return provider, json.dumps(payload).encode()


def _headers(provider: str, body: bytes) -> dict[str, str]:
    match provider:
        case "agentmail":
            return signing.svix_headers(body)
        case "nylas":
            return signing.nylas_headers(body)
        case "stripe":
            return signing.stripe_headers(body)
        case "github":
            return signing.github_headers(body)
    return signing.standard_headers(body)


def _post(url: str, body: bytes, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _ingest(stack: Stack, port: int) -> Supervised:
    env = worker_env(stack.settings, mail_url=stack.mail.base_url, data_dir=stack.tmp / "ingest")
    env.update(
        {
            "ONCEONLY_INGEST_PORT": str(port),
            "ONCEONLY_AGENTMAIL_WEBHOOK_SECRET": signing.SVIX_SECRET,
            "ONCEONLY_NYLAS_WEBHOOK_SECRET": signing.NYLAS_SECRET,
            "ONCEONLY_STRIPE_WEBHOOK_SECRET": signing.STRIPE_SECRET,
            "ONCEONLY_GITHUB_WEBHOOK_SECRET": signing.GITHUB_SECRET,
            "ONCEONLY_STANDARD_WEBHOOK_SECRETS": f"crm={signing.STANDARD_SECRET}",
        }
    )
    return Supervised(
        "ingest",
        [sys.executable, "-m", "onceonly", "ingest"],
        env,
        stack.tmp / "ingest.log",
        append=True,
    ).start()


def _final_states(stack: Stack) -> dict[bytes, str]:
    topic = f"{stack.settings.app_id}-events-changelog"
    states: dict[bytes, str] = {}
    for record in consume_all(stack.settings, topic):
        if record.value() is not None:
            states[record.key()] = json.loads(record.value())[0]
    return states


async def test_odd_signed_deliveries_of_every_provider_each_end_and_no_worker_exits(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=0)
    (stack.tmp / "ingest").mkdir()
    port = free_port()
    ingest = _ingest(stack, port)
    stack.worker(ONCEONLY_SEND_ATTEMPTS="1")
    try:
        await ingest.wait_ready(f"http://127.0.0.1:{port}/readyz", timeout_s=60)
        statuses: list[int] = []

        @settings(
            max_examples=60,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        )
        @given(delivery=odd_deliveries())
        def post(delivery: tuple[str, bytes]) -> None:
            provider, body = delivery
            status = _post(
                f"http://127.0.0.1:{port}/webhooks/{provider}", body, _headers(provider, body)
            )
            statuses.append(status)
            assert status in (204, 400, 401, 413), (status, provider, body[:300])

        await asyncio.to_thread(post)
        for value in (b"null", b"[1, 2]"):  # written straight to the topic, as ingest never does
            await stack.producer.produce(stack.settings.deliveries_topic, value, key=b"odd")

        accepted = [r for r in consume_all(stack.settings, stack.settings.deliveries_topic)]
        envelopes = [
            Envelope.decode(r.value()) for r in accepted if r.value() not in (b"null", b"[1, 2]")
        ]
        keys = {e.dedupe_key.encode() for e in envelopes}
        assert 204 in statuses  # the property saw accepted deliveries, not only refusals

        def settled() -> bool:
            states = _final_states(stack)
            return all(states.get(k) in ("succeeded", "failed") for k in keys)

        await until(stack, settled, "every accepted delivery to end", timeout_s=180)
        letters = [
            json.loads(r.value())
            for r in consume_all(stack.settings, stack.settings.dead_letter_topic)
        ]
        named = {
            f"{e['provider']}:{e['event_id']}".encode()
            for letter in letters
            for e in letter.get("envelopes", [])
        }
        failed = {k for k, state in _final_states(stack).items() if k in keys and state == "failed"}
        assert failed <= named  # a failed event is always one a dead letter names
        assert sum(1 for letter in letters if letter["check"] == "not_an_envelope") >= 2
        stack.check_alive()
    finally:
        ingest.stop()
