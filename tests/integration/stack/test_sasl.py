"""onceonly on a cluster that needs credentials: the session's SCRAM-SHA-256 cluster
(``python -m devstack broker --nodes 3 --sasl``). With the right password ingest, a worker,
replay, lag, trace, the operator page (dead letters, retry, lag, skips) and ``python -m devstack
send`` work; with a wrong one each fails with an error that names the credentials, in
bounded time, instead of waiting for a broker that will never let it in."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from pydantic import SecretStr

from devstack.cluster import LocalCluster
from onceonly.foundation.kafka import Admin, AsyncProducer, Connection, read_to_end
from onceonly.foundation.settings import Settings
from onceonly.ingest.app import Ingest
from onceonly.operations import trace
from onceonly.operations.ops_page import OpsPage, OpsSources, retry_letter
from onceonly.operations.ops_view import Read, Table, TraceView
from onceonly.processors.health import WebhookHealth
from testkit import payloads, signing
from testkit.fakes.agentmail_server import FakeAgentMail
from tests.conftest import SASL_USER
from tests.integration.workers import ROOT, Stack, cluster_settings, worker_env

pytestmark = pytest.mark.integration

REFUSED = "refused onceonly's credentials"


def _settings(cluster: LocalCluster, tmp_path: Path, password: str, **extra: Any) -> Settings:
    """A stack's settings on the SASL cluster with ``password``, its topics created."""
    return cluster_settings(
        cluster.bootstrap,
        tmp_path,
        partitions=2,
        produce_timeout_ms=3000,
        reorder_window_ms=200,
        kafka_security_protocol="SASL_PLAINTEXT",
        kafka_sasl_mechanism="SCRAM-SHA-256",
        kafka_sasl_username=SASL_USER[0],
        kafka_sasl_password=SecretStr(password),
        **extra,
    )


def _security_env(settings: Settings) -> dict[str, str]:
    password = settings.kafka_sasl_password
    assert password is not None
    return {
        "ONCEONLY_KAFKA_SECURITY_PROTOCOL": settings.kafka_security_protocol,
        "ONCEONLY_KAFKA_SASL_MECHANISM": settings.kafka_sasl_mechanism,
        "ONCEONLY_KAFKA_SASL_USERNAME": settings.kafka_sasl_username or "",
        "ONCEONLY_KAFKA_SASL_PASSWORD": password.get_secret_value(),
    }


def _env(settings: Settings, stack: Stack, name: str) -> dict[str, str]:
    return worker_env(
        settings, mail_url=stack.mail.base_url, data_dir=stack.tmp / name, **_security_env(settings)
    )


def _cli(
    env: dict[str, str], *args: str, module: str = "onceonly"
) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done, time.monotonic() - started


async def _post(client: TestClient[Any, Any], n: int, stack: Stack) -> int:
    payload = stack.seed(f"<s{n}@example.com>", f"thr-s{n}", event_id=f"evt-s{n}")
    body = payloads.dumps(payload)
    response = await client.post(
        "/webhooks/agentmail", data=body, headers=signing.svix_headers(body)
    )
    return response.status


async def _ingest(settings: Settings) -> tuple[TestClient[Any, Any], AsyncProducer]:
    producer = AsyncProducer(Connection.from_settings(settings))
    admin = Admin(Connection.from_settings(settings))
    client = TestClient(TestServer(Ingest(settings, producer, admin).app()))
    await client.start_server()
    return client, producer


async def _stack(
    cluster: LocalCluster, mail: FakeAgentMail, tmp_path: Path, **extra: Any
) -> tuple[TestClient[Any, Any], Stack]:
    """The topics on the cluster, ingest in this process, and a stack with the credentials."""
    settings = _settings(cluster, tmp_path, SASL_USER[1], **extra)
    client, producer = await _ingest(settings)
    return client, Stack(settings, producer, mail, tmp_path)


async def test_with_the_credentials_ingest_a_worker_replay_and_lag_work(
    kafka_sasl_cluster: LocalCluster, mail: FakeAgentMail, tmp_path: Path
) -> None:
    client, stack = await _stack(kafka_sasl_cluster, mail, tmp_path)
    settings, producer = stack.settings, stack.producer
    try:
        stack.worker("w1", **_security_env(settings))
        assert [await _post(client, n, stack) for n in range(3)] == [204, 204, 204]
        await stack.until_sent(3, timeout_s=120)

        env = _env(settings, stack, "cli")
        lag, _ = _cli(env, "lag")
        assert lag.returncode == 0, lag.stderr
        assert settings.deliveries_topic in lag.stdout
        replay, _ = _cli(env, "replay", "--from-offset", "0")
        assert replay.returncode == 0, replay.stderr
        assert "replayed 3 records" in replay.stdout
        time.sleep(5)  # the worker reads the replay; the ledger stops a second reply
        stack.check_alive()
        assert sorted(e.replied_to_message_id for e in mail.outbox) == [
            "<s0@example.com>",
            "<s1@example.com>",
            "<s2@example.com>",
        ]
    finally:
        await client.close()
        for worker in stack.workers:
            worker.kill()
        producer.close(timeout_s=1)


async def _dead_letter(settings: Settings, client: TestClient[Any, Any], stack: Stack) -> int:
    """Post a message while the mail API fails every send: the offset of its dead letter."""
    stack.mail.fail_next(1000, status=500)
    assert await _post(client, 0, stack) == 204
    connection = Connection.from_settings(settings)
    deadline = time.monotonic() + 120
    while not (found := read_to_end(connection, settings.dead_letter_topic)):
        assert stack.check_alive() and time.monotonic() < deadline, "no dead letter"
        await asyncio.sleep(1)
    stack.mail.faults.fail_remaining = 0
    return int(found[0].offset())


def _failed(done: subprocess.CompletedProcess[str], expected: str) -> str | None:
    """Why a command did not do its work (None: it exited 0 saying ``expected``)."""
    if done.returncode != 0:
        return f"exit status {done.returncode}: {done.stderr[-1500:]}"
    return None if expected in done.stdout else f"no {expected!r} in {done.stdout[-1500:]}"


def _said(read: Read[Any] | None) -> str | None:
    """A section's error; None once it was read and holds something."""
    if read is None or read.error is not None:
        return "not shown" if read is None else read.error
    value = read.value
    nothing = (isinstance(value, Table) and not value.rows) or (
        isinstance(value, TraceView) and value.text is None
    )
    return "read, but nothing in it" if nothing or not value else None


async def _page(settings: Settings, ident: str) -> dict[str, str | None]:
    """What the operator page's sections say (None: read, and not empty); waits for the
    skip to show (the decisions topic is written off the ack path)."""
    sources = OpsSources(trace=trace, skips=trace.recent_skips)
    page = OpsPage(settings, WebhookHealth(None), sources)
    deadline = time.monotonic() + 60
    while True:
        view = await page.gather(ident)
        said = {
            "letters": _said(view.letters),
            "lag": _said(view.lag),
            "skips": _said(view.skips),
            "trace": _said(view.trace),
        }
        if said["skips"] != "read, but nothing in it" or time.monotonic() > deadline:
            return said
        await asyncio.sleep(2)


async def test_with_the_credentials_trace_the_operator_page_and_send_work(
    kafka_sasl_cluster: LocalCluster, mail: FakeAgentMail, tmp_path: Path
) -> None:
    client, stack = await _stack(kafka_sasl_cluster, mail, tmp_path, send_attempts=1)
    settings, producer = stack.settings, stack.producer
    env = {
        **_env(settings, stack, "cli"),
        "ONCEONLY_AGENTMAIL_WEBHOOK_SECRET": signing.SVIX_SECRET,
    }
    url = f"http://127.0.0.1:{client.server.port}"
    try:
        stack.worker("w1", **_security_env(settings))
        letter = await _dead_letter(settings, client, stack)
        retried = await asyncio.to_thread(retry_letter, settings, letter)
        await stack.until_sent(1)
        send = ("send", "--url", url, "--count", "2", "--wait", "60")
        sent, _ = await asyncio.to_thread(_cli, env, *send, module="devstack")
        traced, _ = await asyncio.to_thread(_cli, env, "trace", "<s0@example.com>")
        page = await _page(settings, "<s0@example.com>")
    finally:
        await client.close()
        for worker in stack.workers:
            worker.kill()
        producer.close(timeout_s=1)

    assert retried == 1, retried  # the letter's one event, sent again
    assert mail.outbox[0].replied_to_message_id == "<s0@example.com>"
    assert sent.stdout.count("HTTP 204") == 3, sent.stdout
    said = {
        "onceonly trace": _failed(traced, "<s0@example.com>"),
        # its verdicts come from the ledger and from traces of the topics
        "python -m devstack send": _failed(sent, "[worker:"),
        **{f"the operator page's {name}": why for name, why in page.items()},
    }
    broken = {what: why for what, why in said.items() if why}
    assert not broken, "\n".join(f"{what}: {why}" for what, why in broken.items())


async def test_with_a_wrong_password_each_fails_clearly_and_soon(
    kafka_sasl_cluster: LocalCluster, mail: FakeAgentMail, tmp_path: Path
) -> None:
    good = _settings(kafka_sasl_cluster, tmp_path, SASL_USER[1])
    settings = good.model_copy(update={"kafka_sasl_password": SecretStr("wrong-password")})
    client, producer = await _ingest(settings)
    stack = Stack(settings, producer, mail, tmp_path)
    env = _env(settings, stack, "cli")
    try:
        started = time.monotonic()
        assert await _post(client, 0, stack) == 503
        assert time.monotonic() - started < settings.produce_timeout_ms / 1000 + 2

        worker, took = _cli(_env(settings, stack, "w1"), "worker")
        assert worker.returncode != 0
        assert REFUSED in worker.stderr + worker.stdout
        assert took < 60

        for args in (("replay", "--from-offset", "0", "--dry-run"), ("lag",)):
            done, took = _cli(env, *args)
            assert done.returncode == 1, args
            assert REFUSED in done.stderr, (args, done.stderr[-2000:])
            assert took < 60, args
            assert "wrong-password" not in done.stderr + done.stdout
    finally:
        await client.close()
        producer.close(timeout_s=1)
