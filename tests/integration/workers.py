"""Real worker processes for integration tests, and a way to feed them deliveries."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from devstack.ports import free_port
from onceonly.foundation.kafka import Admin, AsyncProducer, Connection, consumer_lag
from onceonly.foundation.settings import Settings
from onceonly.foundation.topics import topic_specs
from onceonly.ingest import normalise
from onceonly.processors.writer.contract import reply_key
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from testkit import payloads, signing
from testkit.fakes.agentmail_server import FakeAgentMail
from testkit.invariants import Email, Message, Observed, Verdict, check
from testkit.processes import Supervised
from tests.conftest import consume_all, own_topics

ROOT = Path(__file__).resolve().parents[2]


def cluster_settings(bootstrap: str, tmp_path: Path, **overrides: Any) -> Settings:
    """Settings of a whole stack on a cluster's ``bootstrap``, its topics created: topics
    and an app id of its own, its run dir under ``tmp_path``, and the signing secret of
    testkit's AgentMail webhooks; ``overrides`` as given."""
    settings = own_topics(
        bootstrap,
        own_app=True,
        run_dir=tmp_path / "run",
        agentmail_webhook_secret=SecretStr(signing.SVIX_SECRET),
        **overrides,
    )
    Admin(Connection.from_settings(settings)).ensure_topics(topic_specs(settings))
    return settings


def worker_env(
    settings: Settings, *, mail_url: str, data_dir: Path, **extra: str
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONCEONLY_")}
    env.update(
        {
            "ONCEONLY_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
            "ONCEONLY_PARTITIONS": str(settings.partitions),
            "ONCEONLY_DELIVERIES_TOPIC": settings.deliveries_topic,
            "ONCEONLY_LEDGER_TOPIC": settings.ledger_topic,
            "ONCEONLY_DEAD_LETTER_TOPIC": settings.dead_letter_topic,
            "ONCEONLY_DECISIONS_TOPIC": settings.decisions_topic,
            "ONCEONLY_APP_ID": settings.app_id,
            "ONCEONLY_DATA_DIR": str(data_dir),
            "ONCEONLY_RUN_DIR": str(data_dir / "run"),
            "ONCEONLY_REORDER_WINDOW_MS": str(settings.reorder_window_ms),
            "ONCEONLY_SEND_ATTEMPTS": str(settings.send_attempts),
            "ONCEONLY_AGENTMAIL_BASE_URL": mail_url,
            "AGENTMAIL_API_KEY": "test-api-key",
            "ONCEONLY_LEDGER_RETENTION": str(settings.ledger_retention.total_seconds()),
            "ONCEONLY_LOG_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


class WorkerProcess(Supervised):
    """``onceonly worker`` as a real process: start, SIGKILL, restart with the same state."""

    def __init__(self, name: str, env: dict[str, str], log_path: Path) -> None:
        self.port = free_port()
        super().__init__(
            name,
            [sys.executable, "-m", "onceonly", "worker"],
            {**env, "ONCEONLY_WORKER_PORT": str(self.port)},
            log_path,
            append=True,
        )
        #: False once the test stopped or killed it on purpose
        self.expected = True

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.process

    def start(self) -> WorkerProcess:
        self.expected = True
        super().start()
        return self

    def kill(self) -> None:
        self.expected = False
        super().kill()

    def stop(self, timeout_s: float = 30.0) -> None:
        self.expected = False
        super().stop(timeout_s)

    def metrics(self) -> str:
        """The worker's /metrics text, or "" while its web server is not up yet."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
                return str(r.read().decode())
        except OSError:
            return ""


async def produce_agentmail(
    producer: AsyncProducer, settings: Settings, payload: dict[str, Any]
) -> None:
    """What ingest would produce for this AgentMail payload (ingest is tested on its own)."""
    body = json.dumps(payload)
    envelope = normalise.agentmail(body, {}, datetime.now(UTC))
    await producer.produce(
        settings.deliveries_topic,
        envelope.encode(),
        key=envelope.thread_key.encode(),
        headers=envelope.headers(),
    )


async def wait_for(
    condition: Callable[[], bool], *, timeout_s: float, what: str, logs: Callable[[], str]
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out waiting for {what}; worker log tail:\n{logs()[-3000:]}"
            )
        await asyncio.sleep(0.2)


INBOX = "support@agentmail.to"
SESSION_S = 10  # the worker's broker session (onceonly.processors.runtime.app)


class Stack:
    def __init__(
        self, settings: Settings, producer: AsyncProducer, mail: FakeAgentMail, tmp: Path
    ) -> None:
        self.settings = settings
        self.producer = producer
        self.mail = mail
        self.tmp = tmp
        self.workers: list[WorkerProcess] = []

    def env(self, data: Path, **extra: str) -> dict[str, str]:
        """The environment of a worker (or a command) whose data dir is ``data``."""
        return worker_env(self.settings, mail_url=self.mail.base_url, data_dir=data, **extra)

    def worker(self, name: str = "w1", *, state_of: str | None = None, **env: str) -> WorkerProcess:
        """Start a worker; ``state_of`` names an earlier worker whose data dir it takes over."""
        data = self.tmp / (state_of or name)
        data.mkdir(parents=True, exist_ok=True)
        process = WorkerProcess(name, self.env(data, **env), self.tmp / f"{name}.log")
        self.workers.append(process)
        return process.start()

    def logs(self) -> str:
        return "\n".join(f"--- {w.name}\n{w.log()[-2000:]}" for w in self.workers)

    async def deliver(self, payload: dict[str, Any], times: int = 1) -> None:
        await asyncio.gather(
            *(produce_agentmail(self.producer, self.settings, payload) for _ in range(times))
        )

    def seed(self, message_id: str, thread: str, **kw: Any) -> dict[str, Any]:
        self.mail.seed_message(INBOX, message_id=message_id, thread_id=thread)
        return payloads.agentmail_received(
            inbox_id=INBOX, thread_id=thread, message_id=message_id, **kw
        )

    def check_alive(self) -> bool:
        dead = [w.name for w in self.workers if w.proc is not None and not w.alive and w.expected]
        if dead:
            raise AssertionError(f"worker(s) {dead} died:\n{self.logs()}")
        return True

    async def until_sent(self, count: int, timeout_s: float = 90) -> None:
        await wait_for(
            lambda: self.check_alive() and len(self.mail.outbox) >= count,
            timeout_s=timeout_s,
            what=f"{count} email(s)",
            logs=self.logs,
        )

    async def until_answered(self, message_ids: Sequence[str], timeout_s: float) -> None:
        """Wait until as many emails as ``message_ids`` are out; if they are not, fail
        naming the messages still unanswered."""
        try:
            await self.until_sent(len(message_ids), timeout_s=timeout_s)
        except AssertionError:
            sent = {e.replied_to_message_id for e in self.mail.outbox}
            missing = [m for m in message_ids if m not in sent]
            raise AssertionError(f"{len(sent)} answered; missing {missing}") from None


async def dead_lettered(stack: Stack, message_id: str, thread: str) -> str:
    """A new message whose reply is recorded failed and dead-lettered: the mail API answers
    500 to every send until the record is there (the stack's ``send_attempts`` spent), then
    is up again. Returns the reply key."""
    key = reply_key(INBOX, message_id)
    stack.mail.fail_next(1000, status=500)
    await stack.deliver(stack.seed(message_id, thread))
    await until(stack, lambda: state_of(stack, key) is ReplyState.FAILED, "the failed record")
    stack.mail.faults.fail_remaining = 0
    return key


def restart_mid_send(stack: Stack, worker: WorkerProcess, key: str) -> ReplyRecord:
    """Kills ``worker`` while the send of reply ``key`` is held in flight (the fake mail
    API's ``send_delay_s``): its record pending, no email out. Then starts it again, sends
    no longer delayed. Returns the pending record."""
    pending = ledger_records(stack)[key]
    worker.kill()
    assert pending.state is ReplyState.PENDING
    assert stack.mail.outbox == []
    stack.mail.faults.send_delay_s = 0.0
    worker.start()
    return pending


def ledger_records(stack: Stack) -> dict[str, ReplyRecord]:
    records = consume_all(stack.settings, stack.settings.ledger_topic)
    return {r.key().decode(): ReplyRecord.decode(r.value()) for r in records if r.value()}


def state_of(stack: Stack, key: str) -> ReplyState | None:
    """The ledger's state of reply ``key`` (None: no record yet)."""
    record = ledger_records(stack).get(key)
    return record.state if record is not None else None


def writer_env(stack: Stack) -> dict[str, str]:
    return {
        "ONCEONLY_REPLY_WRITER": "tests.integration.writers:unique",
        "ONCEONLY_TEST_WRITER_LOG": str(stack.tmp / "writer.log"),
    }


def writer_calls(stack: Stack) -> list[str]:
    path = stack.tmp / "writer.log"
    return path.read_text().splitlines() if path.exists() else []


async def until(
    stack: Stack, condition: Callable[[], bool], what: str, timeout_s: float = 90
) -> None:
    await wait_for(
        lambda: stack.check_alive() and condition(), timeout_s=timeout_s, what=what, logs=stack.logs
    )


async def handled(stack: Stack, timeout_s: float = 120) -> None:
    """Until the group has committed past every record of the deliveries topic: each one
    handled and its work done (a worker commits a record only after its work). What the
    workers did is then all they will do with what was delivered so far."""
    connection, settings = Connection.from_settings(stack.settings), stack.settings

    def done() -> bool:
        rows = consumer_lag(connection, settings.app_id, settings.deliveries_topic)
        return all(row.lag == 0 for row in rows)

    await until(stack, done, "every delivery handled and committed", timeout_s=timeout_s)


def onceonly(stack: Stack, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The ``onceonly`` command, run as a user would, against ``stack``'s broker and topics,
    with ``env`` on top of the stack's environment."""
    return subprocess.run(
        [sys.executable, "-m", "onceonly", *args],
        env={**stack.env(stack.tmp / "cli", **env), "COLUMNS": "200"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def model_env(stack: Stack, **extra: str) -> dict[str, str]:
    """A worker with the model-like writer (tests.integration.writers.model), logging its
    calls to ``writer.jsonl`` and its effects to ``effects.log`` in the test's folder."""
    return {
        "ONCEONLY_REPLY_WRITER": "tests.integration.writers:model",
        "ONCEONLY_TEST_WRITER_LOG": str(stack.tmp / "writer.jsonl"),
        "ONCEONLY_TEST_EFFECT_LOG": str(stack.tmp / "effects.log"),
        "ONCEONLY_WRITER_BACKOFF_S": "0.1",
        **extra,
    }


def model_calls(stack: Stack, event: str = "start") -> list[dict[str, Any]]:
    """The model writer's logged calls of one kind (start, end, raise, cancelled)."""
    path = stack.tmp / "writer.jsonl"
    if not path.exists():
        return []
    return [e for e in map(json.loads, path.read_text().splitlines()) if e["event"] == event]


def dead_letters(stack: Stack) -> list[dict[str, Any]]:
    records = consume_all(stack.settings, stack.settings.dead_letter_topic)
    return [json.loads(r.value()) for r in records]


def verdict(stack: Stack, message_ids: Iterable[str], inbox: str = INBOX) -> Verdict:
    """The run judged as the simulator and the chaos suite judge theirs
    (:func:`testkit.invariants.check`): ``message_ids`` (of ``inbox``) against the mail
    server's emails and the ledger topic, every message expected settled."""
    return check(
        Observed(
            messages=tuple(Message(inbox, m) for m in message_ids),
            emails=tuple(
                Email(e.inbox_id, e.replied_to_message_id, e.text) for e in stack.mail.outbox
            ),
            ledger=ledger_records(stack),
        )
    )


def sent_to(stack: Stack) -> Counter[str]:
    """How many emails each message id got."""
    return Counter(e.replied_to_message_id for e in stack.mail.outbox)
