"""The flow-control benchmark's stack: fresh topics, the fake model and mail APIs, workers."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench._proc_phases import Bench
from bench._proc_stack import scrape
from bench._procs import Broker, ServerProcess
from devstack.ports import free_port
from onceonly.foundation.kafka import AsyncProducer, Connection
from onceonly.foundation.settings import Settings
from onceonly.ingest import normalise
from testkit import payloads
from testkit.fakes.agentmail_server import FakeAgentMail
from testkit.fakes.openai_server import FakeChatModel


@dataclass
class Stack:
    """One run: fresh topics (:class:`~bench._proc_phases.Bench`'s, which starts the
    workers), the two fake APIs, the workers and a producer."""

    broker: Broker
    work: Path
    partitions: int
    mail: FakeAgentMail = field(default_factory=FakeAgentMail)
    chat: FakeChatModel = field(default_factory=FakeChatModel)
    workers: list[ServerProcess] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)
    producer: AsyncProducer | None = None

    def __post_init__(self) -> None:
        self.bench = Bench.fresh(self.broker, self.work, "flow", self.partitions)
        self.topics = self.bench.topics
        self.mail.start_in_thread()
        self.chat.start_in_thread()
        settings = Settings(kafka_bootstrap=self.broker.bootstrap)
        self.producer = AsyncProducer(Connection.from_settings(settings))

    def worker(self, **extra: str) -> None:
        """One more worker of the group (Bench's worker settings, a data directory and a
        port of its own), replying through the fake AgentMail and the fake model."""
        name, port = f"w{len(self.workers) + 1}", free_port()
        process, _ = self.bench.spawn_worker(
            name,
            ONCEONLY_DATA_DIR=str(self.bench.work / name),
            ONCEONLY_RUN_DIR=str(self.bench.work / name / "run"),
            ONCEONLY_WORKER_PORT=str(port),
            ONCEONLY_AGENTMAIL_BASE_URL=self.mail.base_url,
            ONCEONLY_REPLY_WRITER="onceonly.processors.writer.openai:reply",
            OPENAI_BASE_URL=f"{self.chat.base_url}/v1",
            OPENAI_API_KEY="bench",
            OPENAI_MODEL="bench-model",
            ONCEONLY_WRITER_BACKOFF_S="0.1",
            **extra,
        )
        self.workers.append(process)
        self.ports.append(port)

    async def wait_shares(self, share: float, timeout_s: float = 180) -> None:
        """Until every worker has its share of the budget (its partitions assigned)."""
        wanted = f"{share:.1f}" if share in (0.5, 1.0) else str(share)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = [scrape(port) or {} for port in self.ports]
            if all(f"{m.get('onceonly_model_share', -1):.1f}" == wanted for m in found):
                return
            await asyncio.sleep(0.5)
        raise RuntimeError(f"the workers never reached share {share}; see {self.bench.work}")

    async def deliver(self, inbox: str, names: list[str]) -> dict[str, float]:
        """One message per thread to ``inbox``, produced at once; message id -> acked at."""
        acked: dict[str, float] = {}
        assert self.producer is not None

        async def one(name: str) -> None:
            message_id = f"<{name}@bench.example>"
            self.mail.seed_message(inbox, message_id=message_id, thread_id=name)
            body = json.dumps(
                payloads.agentmail_received(
                    inbox_id=inbox, thread_id=name, message_id=message_id, text=f"hi {name}"
                )
            )
            envelope = normalise.agentmail(body, {}, datetime.now(UTC))
            await self.producer.produce(  # type: ignore[union-attr]
                self.topics["ONCEONLY_DELIVERIES_TOPIC"],
                envelope.encode(),
                key=envelope.thread_key.encode(),
                headers=envelope.headers(),
            )
            acked[message_id] = time.monotonic()

        for start in range(0, len(names), 500):
            await asyncio.gather(*(one(n) for n in names[start : start + 500]))
        return acked

    async def answered(
        self, ids: set[str], timeout_s: float, seen: dict[str, float] | None = None
    ) -> dict[str, float]:
        """Message id -> when its email was first seen (polled every 50 ms)."""
        seen = {} if seen is None else seen
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not ids <= set(seen):
            now = time.monotonic()
            for entry in self.mail.outbox:
                if entry.replied_to_message_id in ids:
                    seen.setdefault(entry.replied_to_message_id, now)
            await asyncio.sleep(0.05)
        return seen

    def written_at(self) -> dict[str, float]:
        """Message id -> when its reply's text was recorded (the ledger record's
        ``created_at``, as monotonic time): where the writer's part of a wait ends."""
        from onceonly.foundation.kafka import Connection, ranges, read
        from onceonly.schemas.ledger import ReplyRecord

        topic = self.topics["ONCEONLY_LEDGER_TOPIC"]
        offset = time.time() - time.monotonic()
        out: dict[str, float] = {}
        connection = Connection(self.broker.bootstrap)
        for message in read(connection, topic, ranges(connection, topic, from_offset=0)):
            if message.value() is None:
                continue
            record = ReplyRecord.decode(message.value())
            out.setdefault(record.message_id, record.created_at.timestamp() - offset)
        return out

    def sent_to(self) -> Counter[str]:
        return Counter(e.replied_to_message_id for e in self.mail.outbox)

    def close(self) -> None:
        for process in self.workers:
            process.stop()
        if self.producer is not None:
            self.producer.close(timeout_s=2)
        self.mail.stop_in_thread()
        self.chat.stop_in_thread()
