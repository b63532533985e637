"""``onceonly dead-letters retry`` tells the truth (issue 35, items 2 to 4 and 6).

Real broker, real worker processes, the command run as a user would: a letter is closed
only when what it held was sent again and acknowledged; a retry without the worker's
secret is refused; a forged letter planted on the dead-letter topic is never sent; a
record the broker refuses leaves its letter open and the command fails. And ``onceonly
up`` with two ingest processes and no secret answers ``python -m devstack send``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from onceonly.ingest import normalise
from onceonly.schemas.envelope import Envelope
from tests.conftest import consume_all
from tests.integration.devstack.running_up import devstack_send, running_up, up_env, wait_for
from tests.integration.workers import Stack, onceonly, until

pytestmark = pytest.mark.integration

SECRET = "the-workers-envelope-secret"


def _envelope(stack: Stack, message_id: str, thread: str) -> Envelope:
    payload = stack.seed(message_id, thread)
    return normalise.agentmail(json.dumps(payload), {}, datetime.now(UTC))


async def _deliver_signed(stack: Stack, envelope: Envelope, secret: str = SECRET) -> None:
    """What ingest writes with ONCEONLY_ENVELOPE_SECRET=``secret``: the record and its MAC."""
    value = envelope.encode()
    await stack.producer.produce(
        stack.settings.deliveries_topic,
        value,
        key=envelope.thread_key.encode(),
        headers=envelope.headers(secret.encode(), value),
    )


def _records(stack: Stack) -> list[tuple[int, dict[str, Any]]]:
    topic = stack.settings.dead_letter_topic
    return [(int(r.offset()), json.loads(r.value())) for r in consume_all(stack.settings, topic)]


def _letters(stack: Stack) -> dict[int, dict[str, Any]]:
    """Every letter of the dead-letter topic (the retry notes left out), by id."""
    return {n: v for n, v in _records(stack) if v.get("kind") != "retried"}


def _open(stack: Stack) -> set[int]:
    """The ids of the letters no retry note names."""
    closed = {
        int(x) for _, v in _records(stack) if v.get("kind") == "retried" for x in v["letters"]
    }
    return set(_letters(stack)) - closed


async def _failed_send(stack: Stack, message_id: str, thread: str) -> int:
    """A delivery whose reply the mail API refuses: the id of its dead letter."""
    before = set(_letters(stack))
    stack.mail.fail_next(1000, status=500)
    await _deliver_signed(stack, _envelope(stack, message_id, thread))
    await until(stack, lambda: len(set(_letters(stack)) - before) == 1, "the dead letter")
    stack.mail.faults.fail_remaining = 0  # the mail API is up again
    (letter,) = set(_letters(stack)) - before
    return letter


async def _refused_reply(
    stack_factory: Callable[..., Stack], message_id: str, thread: str
) -> tuple[Stack, int]:
    """A stack whose worker holds :data:`SECRET` and sends once; and the id of the dead
    letter of a reply the mail API refused (:func:`_failed_send`)."""
    stack = stack_factory(reorder_window_ms=0, send_attempts=1)
    stack.worker(ONCEONLY_ENVELOPE_SECRET=SECRET)
    return stack, await _failed_send(stack, message_id, thread)


def _with_secret(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    """The command in a shell that holds the worker's secret."""
    return onceonly(stack, *args, ONCEONLY_ENVELOPE_SECRET=SECRET)


def _answered(stack: Stack) -> list[str]:
    return sorted(str(e.replied_to_message_id) for e in stack.mail.outbox)


async def test_a_retry_without_the_workers_secret_is_refused_and_the_letter_stays_open(
    stack_factory: Callable[..., Stack],
) -> None:
    stack, letter = await _refused_reply(stack_factory, "<nokey@example.com>", "thr-nokey")

    refused = onceonly(stack, "dead-letters", "retry")  # a shell without the secret
    await asyncio.sleep(4)  # time for a copy to be dead-lettered again, were one sent

    assert refused.returncode != 0, refused.stdout
    assert "ONCEONLY_ENVELOPE_SECRET" in refused.stderr, refused.stderr
    assert set(_letters(stack)) == {letter}  # no copy came back as a bad_mac letter
    assert _open(stack) == {letter}

    done = _with_secret(stack, "dead-letters", "retry")
    await stack.until_sent(1)
    await asyncio.sleep(2)

    assert done.returncode == 0, done.stderr
    assert "re-sent 1 event(s) from 1 dead letter(s)" in done.stdout
    assert _answered(stack) == ["<nokey@example.com>"]
    assert _open(stack) == set()


async def test_a_forged_letter_planted_on_the_dead_letter_topic_is_never_sent(
    stack_factory: Callable[..., Stack],
) -> None:
    stack, genuine = await _refused_reply(stack_factory, "<genuine@example.com>", "thr-genuine")
    forged = _envelope(stack, "<forged@example.com>", "thr-forged")
    # straight to the deliveries topic, the forged envelope is refused (bad_mac, no email)
    await stack.producer.produce(
        stack.settings.deliveries_topic, forged.encode(), key=b"thr-forged", headers=[]
    )
    await until(stack, lambda: len(_letters(stack)) == 2, "the bad_mac letter")
    # planted as dead letters: one as letters were written before, one with a made-up MAC
    for extra in ({}, {"v": 2, "macs": ["0" * 64]}):
        planted = {
            "reason": "send_failed: 500",
            "check": "send_failed",
            "envelopes": [forged.to_json()],
            "at": datetime.now(UTC).isoformat(),
            **extra,
        }
        await stack.producer.produce(stack.settings.dead_letter_topic, json.dumps(planted).encode())
    await until(stack, lambda: len(_letters(stack)) == 4, "the planted letters")
    planted_ids = (
        set(_letters(stack))
        - {genuine}
        - {n for n, v in _letters(stack).items() if v.get("check") == "bad_mac"}
    )

    done = _with_secret(stack, "dead-letters", "retry")
    await stack.until_sent(1)
    await asyncio.sleep(4)  # time for the forged message's reply, were it sent

    assert _answered(stack) == ["<genuine@example.com>"]
    assert "re-sent 1 event(s) from 1 dead letter(s)" in done.stdout, done.stdout
    assert done.returncode != 0  # letters were left open: the retry did not do all it was asked
    for planted_id in planted_ids:
        assert f"dead letter {planted_id} left open" in done.stderr, done.stderr
    assert "MAC" in done.stderr
    assert genuine not in _open(stack) and planted_ids <= _open(stack)


def _max_message_bytes(bootstrap: str, topic: str, value: str) -> None:
    """Set the topic's max.message.bytes on the broker: records above it are refused."""
    entry = ConfigEntry("max.message.bytes", value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


async def test_a_record_the_broker_refuses_leaves_its_letter_open_and_the_retry_fails(
    stack_factory: Callable[..., Stack],
) -> None:
    stack, letter = await _refused_reply(stack_factory, "<refused@example.com>", "thr-refused")
    settings = stack.settings
    _max_message_bytes(settings.kafka_bootstrap, settings.deliveries_topic, "200")

    refused = _with_secret(stack, "dead-letters", "retry")

    assert refused.returncode != 0, refused.stdout
    assert f"dead letter {letter}" in refused.stderr and "not sent" in refused.stderr
    assert "re-sent 0 event(s)" in refused.stdout
    assert _open(stack) == {letter}

    _max_message_bytes(
        settings.kafka_bootstrap, settings.deliveries_topic, str(settings.record_max_bytes)
    )
    done = _with_secret(stack, "dead-letters", "retry")
    await stack.until_sent(1)
    await asyncio.sleep(2)

    assert done.returncode == 0, done.stderr
    assert _answered(stack) == ["<refused@example.com>"]
    assert _open(stack) == set()


@pytest.mark.timeout(600)
def test_up_with_two_ingest_processes_and_no_secret_answers_send(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:8]
    env = up_env(
        tmp_path,
        ONCEONLY_KAFKA_BOOTSTRAP=kafka_bootstrap,  # the session's broker: up starts none
        ONCEONLY_INGEST_PROCESSES="2",
        ONCEONLY_APP_ID=f"onceonly-up-{suffix}",
        ONCEONLY_DELIVERIES_TOPIC=f"deliveries-{suffix}",
        ONCEONLY_LEDGER_TOPIC=f"replies-{suffix}",
        ONCEONLY_DEAD_LETTER_TOPIC=f"dead-letters-{suffix}",
        ONCEONLY_DECISIONS_TOPIC=f"decisions-{suffix}",
    )
    with running_up(tmp_path, env) as up:
        wait_for(lambda: "worker ready" in up.output(), 120, "the worker", up.log)
        sent = devstack_send(up)

    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.count("HTTP 204") == 4, sent.stdout
    assert sent.stdout.count("answered in the dry-run outbox") == 1, sent.stdout


async def test_records_signed_before_a_rotation_are_readmitted_with_the_previous_secret(
    stack_factory: Callable[..., Stack], tmp_path: Path
) -> None:
    stack = stack_factory(reorder_window_ms=0)
    stack.worker(ONCEONLY_ENVELOPE_SECRET=SECRET)
    old = "the-secret-before-the-rotation"
    (tmp_path / "old-secret").write_text(old + "\n")
    envelope = _envelope(stack, "<rotated@example.com>", "thr-rotated")
    await _deliver_signed(stack, envelope, old)  # written before the rotation
    await until(stack, lambda: len(_letters(stack)) == 1, "the bad_mac letter")
    ((letter, body),) = _letters(stack).items()

    retried = _with_secret(stack, "dead-letters", "retry")
    unproven = _with_secret(stack, "dead-letters", "readmit", str(letter))

    assert body["check"] == "bad_mac"
    assert retried.returncode != 0 and "readmit" in retried.stderr, retried.stderr
    assert unproven.returncode != 0 and "verifies under neither" in unproven.stderr
    assert _open(stack) == {letter}

    readmitted = _with_secret(
        stack,
        "dead-letters",
        "readmit",
        str(letter),
        "--previous-secret-file",
        str(tmp_path / "old-secret"),
    )
    await stack.until_sent(1)
    await asyncio.sleep(2)

    assert readmitted.returncode == 0, readmitted.stderr
    assert "re-admitted 1 event(s) from 1 dead letter(s)" in readmitted.stdout
    assert _answered(stack) == ["<rotated@example.com>"]
    assert _open(stack) == set() and len(_letters(stack)) == 1


def _http(port: int, request: bytes) -> int:
    """The status a raw HTTP/1.1 request gets from the worker's web port."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(request)
        return int(conn.makefile("rb").readline().split()[1])


async def test_the_operator_page_refuses_odd_input_instead_of_failing(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=0)
    worker = stack.worker(ONCEONLY_OPS_TOKEN="ops-token")
    await until(stack, lambda: "onceonly_" in worker.metrics(), "the worker's web port")
    digits = "9" * 5000
    post = b"POST /ops/dead-letters/%s/retry HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"

    shown = _http(worker.port, f"GET /ops?retried={digits} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    huge = _http(worker.port, post % digits.encode() + b"Authorization: Bearer ops-token\r\n\r\n")
    odd = _http(worker.port, post % b"1" + b"Authorization: Bearer \xff\xfe\r\n\r\n")

    assert (shown, huge, odd) == (200, 404, 403)


def _retry_on_page(port: int, letter: int) -> tuple[int, str]:
    """The operator page's retry button, with the token: the status and the page."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/ops/dead-letters/{letter}/retry",
        data=b"",
        method="POST",
        headers={"Authorization": "Bearer ops-token"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


async def test_the_operator_pages_retry_button_never_sends_a_forged_letter(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=0, send_attempts=1)
    worker = stack.worker(ONCEONLY_ENVELOPE_SECRET=SECRET, ONCEONLY_OPS_TOKEN="ops-token")
    genuine = await _failed_send(stack, "<page@example.com>", "thr-page")
    forged = _envelope(stack, "<page-forged@example.com>", "thr-page-forged")
    planted = {"reason": "send_failed: 500", "check": "send_failed", "v": 2}
    planted |= {"envelopes": [forged.to_json()], "macs": ["0" * 64]}
    await stack.producer.produce(stack.settings.dead_letter_topic, json.dumps(planted).encode())
    await until(stack, lambda: len(_letters(stack)) == 2, "the planted letter")
    (planted_id,) = set(_letters(stack)) - {genuine}

    refused = await asyncio.to_thread(_retry_on_page, worker.port, planted_id)
    retried = await asyncio.to_thread(_retry_on_page, worker.port, genuine)
    await stack.until_sent(1)
    await asyncio.sleep(4)  # time for the forged message's reply, were it sent

    assert refused[0] == 409 and "does not verify" in refused[1]
    assert retried[0] == 200 and f"dead letter {genuine} retried at" in retried[1]
    assert _answered(stack) == ["<page@example.com>"]
    assert _open(stack) == {planted_id}
