"""``python -m bench.step_floors`` (issue 46, item 1): each step of the worker measured alone,
outside the worker, on an embedded broker: its floor of CPU per operation (the median of
``--rounds`` rounds after a warm-up), and per reply. CPU is ``time.process_time()`` (all
threads: RocksDB's too), except the consume at one record per fetch: ``time.thread_time()``
of the loop's thread, so that the producer feeding it a record at a time is not counted."""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench._options import Opt, Values
from bench._proc_records import Record, agentmail_records, produce
from bench._procs import BenchError, Broker, console, create_topics, topic_settings
from bench._report import verdict_report
from bench._runner import Scenario, command

RATE, COMMIT_INTERVAL_S = 50, 2.8  #: replies/s at one at a time; faust's commit timer (s)
TIMER = 1 / (RATE * COMMIT_INTERVAL_S)  #: the timer's commits per reply
BOTH, ONE, BATCHED = "both", "one at a time", "batched"
#: (measurement, step, one operation, operations per reply, the shape it counts in)
ROWS = (
    ("consume1", "consume + decode", "a record, one per fetch", 1, ONE),
    ("consume", "consume + decode", "a record, fetched in batches", 1, BATCHED),
    ("dedupe", "dedupe write", "claim + finish of an event (1 get, 2 puts)", 1, BOTH),
    ("holds", "reorder hold", "hold, take, take newer, settle (9 gets, 2 puts, a delete)", 1, BOTH),
    ("writer", "writer scheduling", "Writer.write, the writer returns at once", 1, BOTH),
    ("produce1", "ledger write + ack", "a record produced, acked, one at a time", 2, ONE),
    ("produce", "ledger write + ack", "a record of --ops produced together", 2, BATCHED),
    ("produce1", "changelog records", "a record produced, acked, one at a time", 5, ONE),
    ("produce", "changelog records", "a record of --ops produced together", 5, BATCHED),
    ("fence", "fence check", "Rounds -> the consumer thread's loop -> commit", 4, ONE),
    ("commit", "commit (faust's timer)", "a commit on the consumer's loop", TIMER, BOTH),
    ("sdk", "send through the mail SDK", "AgentMailSender.reply (bench.sdk_cost)", 1, BOTH),
)  # fmt: skip
Step = Callable[[int], Awaitable[float]]  #: n operations -> their CPU seconds


def per_reply(floors_us: Mapping[str, float]) -> tuple[list[tuple[str, ...]], dict[str, float]]:
    """The table's rows (step, operation, µs/op, ops/reply, shape, ms/reply) and the ms per
    reply of each shape (the sum of its rows and of those counting in both)."""
    rows, totals = [], {ONE: 0.0, BATCHED: 0.0}
    for key, step, op, ops, shape in ROWS:
        ms = floors_us[key] * ops / 1000
        for name in totals:
            totals[name] += ms if shape in (BOTH, name) else 0.0
        rows.append((step, op, f"{floors_us[key]:,.1f}", f"{ops:.3g}", shape, f"{ms:.3f}"))
    return rows, totals


async def median_us(step: Step, ops: int, rounds: int) -> float:
    await step(ops // 5)  # the warm-up: connections, caches, first calls
    return statistics.median([await step(ops) / ops * 1e6 for _ in range(rounds)])


def cpu(body: Callable[[Any], Awaitable[Any]], items: Callable[[int], Any] = range) -> Step:
    """A step: ``body`` over ``items(n)`` (made before the clock starts)."""

    async def step(n: int) -> float:
        batch = items(n)
        began = time.process_time()
        await body(batch)
        return time.process_time() - began

    return step


async def local_floors(opts: Values, work: Path, settings: Any) -> dict[str, float]:
    """Dedupe, holds and writer: no Kafka; the tables are RocksDB as faust opens them."""
    from faust.stores.rocksdb import RocksDBOptions

    from onceonly.processors.dedupe.claims import claim, finish
    from onceonly.processors.flow.admission import admission_for
    from onceonly.processors.messages import Inbound
    from onceonly.processors.reorder.holds import Delivery, Holds
    from onceonly.processors.runtime.tables import rocks_options
    from onceonly.processors.runtime.worker import writer_policy
    from onceonly.processors.writer.runner import Writer
    from onceonly.schemas.envelope import Envelope

    made, now = [0], int(time.time() * 1000)
    events, holds = (RocksDBOptions(**rocks_options(settings)).open(work / n) for n in "eh")
    hold = Holds(holds, window_ms=0)  # events: work/e, holds: work/h

    def fresh(n: int) -> list[Delivery]:  # events the tables have never seen
        made[0] += n
        got = agentmail_records(n, start=made[0])
        return [Delivery(Envelope.decode(r[1]), (0, made[0] + i)) for i, r in enumerate(got)]

    async def dedupe(batch: list[Delivery]) -> None:
        for d in batch:
            finish(events, claim(events, [d], now_ms=now, metrics=None), {}, now_ms=now)

    async def reorder(batch: list[Delivery]) -> None:
        for d in batch:
            key = d.envelope.thread_key.encode()
            hold.hold(d, now_ms=now)
            taken = hold.take(key, now_ms=now)
            hold.take(key, now_ms=now, window_ms=0)  # the conversation's newer(): none
            hold.settle(key, taken, now_ms=now)

    async def answer(burst: Any) -> str:
        return "Thanks, we are on it."

    writer = Writer(answer, writer_policy(settings), admission=admission_for(settings))
    inbound = Inbound("in@x", "<m@x>", "agentmail:t", "t", "e", datetime.now(UTC), "c@x", "Hi", "")

    async def write(batch: range) -> None:
        for _ in batch:
            await writer.write([inbound])

    steps = {"dedupe": cpu(dedupe, fresh), "holds": cpu(reorder, fresh), "writer": cpu(write)}
    return {name: await median_us(s, opts.ops, opts.rounds) for name, s in steps.items()}


async def kafka_floors(opts: Values, bootstrap: str, topics: dict[str, str]) -> dict[str, float]:
    """Consume + decode, produce and acknowledgement: aiokafka as faust runs it."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from confluent_kafka import Producer

    from bench.index_size import ledger_records
    from onceonly.schemas.envelope import Envelope

    deliveries, ledger = topics["ONCEONLY_DELIVERIES_TOPIC"], topics["ONCEONLY_LEDGER_TOPIC"]
    total = opts.ops // 5 + opts.rounds * opts.ops
    produce(bootstrap, deliveries, agentmail_records(total), total)
    tp = TopicPartition(deliveries, 0)
    reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await reader.start()
    reader.assign([tp])

    async def consume(n: int, clock: Callable[[], float] = time.process_time) -> float:
        began, got = clock(), 0
        while got < n:
            batches = await reader.getmany(tp, timeout_ms=10_000, max_records=n - got)
            if not batches:
                raise BenchError(f"no record from {deliveries} within 10 s")
            for record in batches[tp]:
                Envelope.decode(record.value)
                got += 1
        return clock() - began

    floors = {"consume": await median_us(consume, opts.ops, opts.rounds)}
    fed, feed = agentmail_records(10**9, start=total), Producer({"bootstrap.servers": bootstrap})

    async def consume1(n: int) -> float:  # one record produced, then read: a fetch each
        spent = 0.0
        for key, value, headers in (next(fed) for _ in range(n)):
            feed.produce(deliveries, value, key=key, headers=headers, partition=0)
            feed.flush(10)
            spent += await consume(1, time.thread_time)
        return spent

    floors["consume1"] = await median_us(consume1, opts.single, opts.rounds)
    await reader.stop()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")  # faust's acks=-1
    await producer.start()

    def replies(n: int) -> list[Record]:  # as the worker writes them, encoded
        return list(ledger_records(n, 0))

    async def one_by_one(batch: list[Record]) -> None:
        for key, value, _ in batch:
            await producer.send_and_wait(ledger, value, key=key)

    async def together(batch: list[Record]) -> None:
        sent = [await producer.send(ledger, value, key=key) for key, value, _ in batch]
        await asyncio.gather(*sent)

    floors["produce1"] = await median_us(cpu(one_by_one, replies), opts.single, opts.rounds)
    floors["produce"] = await median_us(cpu(together, replies), opts.ops, opts.rounds)
    await producer.stop()
    floors |= await librdkafka_floors(opts, bootstrap, topics, replies)
    return floors | await commit_floors(opts, bootstrap, ledger)


async def librdkafka_floors(
    opts: Values, bootstrap: str, topics: dict[str, str], replies: Callable[[int], list[Record]]
) -> dict[str, float]:
    """The one-at-a-time produce and consume through confluent-kafka (librdkafka, its I/O
    on threads of its own, counted: ``process_time``) instead of aiokafka: what a worker
    whose Kafka client were librdkafka would spend (not a row of the per-reply table)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    from onceonly.schemas.envelope import Envelope

    deliveries, ledger = topics["ONCEONLY_DELIVERIES_TOPIC"], topics["ONCEONLY_LEDGER_TOPIC"]
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})

    async def one_by_one(batch: list[Record]) -> None:
        for key, value, _ in batch:
            producer.produce(ledger, value, key=key)
            if producer.flush(10):
                raise BenchError(f"a record to {ledger} not acknowledged within 10 s")

    produced = await median_us(cpu(one_by_one, replies), opts.single, opts.rounds)
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "floors-librdkafka",
                       "enable.auto.commit": False, "fetch.wait.max.ms": 500})  # fmt: skip
    _, high = reader.get_watermark_offsets(TopicPartition(deliveries, 0), timeout=10)
    reader.assign([TopicPartition(deliveries, 0, high)])
    fed = agentmail_records(10**9, start=10**8)

    async def fed_and_read(batch: range) -> None:  # a record produced, then read: a fetch each
        for key, value, headers in (next(fed) for _ in batch):
            producer.produce(deliveries, value, key=key, headers=headers, partition=0)
            producer.flush(10)
            message = reader.poll(10)
            if message is None or message.error():
                raise BenchError(f"no record from {deliveries} within 10 s")
            Envelope.decode(message.value() or b"")

    both = await median_us(cpu(fed_and_read), opts.single, opts.rounds)

    async def commits(batch: range) -> None:  # as the fence's round: one OffsetCommit
        for n in batch:
            reader.commit(offsets=[TopicPartition(deliveries, 0, n)], asynchronous=False)

    committed = await median_us(cpu(commits), opts.single, opts.rounds)
    reader.close()
    # the feed's own produce and flush is the row above's (a ledger record, about as long)
    return {
        "produce1_rd": produced,
        "consume1_rd": max(both - produced, 0.0),
        "commit_rd": committed,
    }


async def commit_floors(opts: Values, bootstrap: str, topic: str) -> dict[str, float]:
    """A group member's commit of the same offset, one at a time, on a loop in a thread of its
    own as faust's consumer's: made on that loop (faust's timer's), and asked from this loop
    as the fence asks it (``Rounds`` -> ``TrackingConsumer._commit_on_thread_loop`` there)."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import OffsetAndMetadata
    from faust.types import TP

    from onceonly.processors.fence import Rounds
    from onceonly.processors.runtime.consumer import TrackingConsumer

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    def there(coro: Any) -> Awaitable[Any]:
        return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))

    async def join() -> AIOKafkaConsumer:
        member = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="step-floors")
        await member.start()
        while not member.assignment():
            await member.getmany(timeout_ms=500)
        member.pause(*member.assignment())  # no fetches meanwhile: the commits alone
        return member

    member = await there(join())
    mine = next(iter(member.assignment()))
    offsets, tp = {mine: OffsetAndMetadata(0, "")}, TP(mine.topic, mine.partition)

    async def commits(batch: range) -> None:
        for _ in batch:
            await member.commit(offsets)

    thread = type("ConsumerThread", (), {"_ensure_consumer": lambda self: member})()

    async def ask(tp: TP) -> bool | None:  # TrackingConsumer._commit_as_member's hop
        commit = TrackingConsumer._commit_on_thread_loop(thread, tp, 0, 10.0)
        return await asyncio.wait_for(there(commit), 11.0)

    rounds = Rounds(ask)

    async def fences(batch: range) -> None:
        for _ in batch:
            if not await rounds(tp):
                raise BenchError("the group coordinator refused a commit")

    try:
        return {
            "commit": await median_us(cpu(lambda b: there(commits(b))), opts.single, opts.rounds),
            "fence": await median_us(cpu(fences), opts.single, opts.rounds),
        }
    finally:
        await there(member.stop())
        loop.call_soon_threadsafe(loop.stop)


def sdk_floor(opts: Values, work: Path) -> float:
    """bench.sdk_cost's figure: µs of CPU per ``AgentMailSender.reply`` (the direct path) to
    the instant mail server, the median of ``--rounds`` runs."""
    from bench._proc_stack import serve_mail
    from bench.sdk_cost import sdk_cost_ms

    mail, port = serve_mail(work / "mail.log")
    try:
        runs = [sdk_cost_ms(f"http://127.0.0.1:{port}", opts.sdk_calls) for _ in range(opts.rounds)]
        return 1000 * statistics.median(runs)
    finally:
        mail.stop()


def collect(opts: Values, broker: Broker, work: Path) -> dict[str, float]:
    topics = create_topics(broker.bootstrap, 1, "floors")
    console.print("dedupe, holds, writer …")
    floors = asyncio.run(local_floors(opts, work, topic_settings(broker.bootstrap, 1, topics)))
    console.print("consume, produce, commits …")
    floors |= asyncio.run(kafka_floors(opts, broker.bootstrap, topics))
    console.print("the mail SDK …")
    return floors | {"sdk": sdk_floor(opts, work)}


def report(opts: Values, floors: dict[str, float]) -> list[str]:
    rows, totals = per_reply(floors)
    headers = ("step", "one operation", "µs/op", "ops/reply", "counts in", "ms/reply")
    return verdict_report(headers, rows, [
        *(f"floor per reply, {shape}: **{ms:.2f} ms**" for shape, ms in totals.items()),
        f"median of {opts.rounds} rounds of {opts.ops} operations ({opts.single} for the "
        f"one-at-a-time Kafka steps and the commits; {opts.sdk_calls} SDK calls), after a "
        "warm-up; a row counts in its shape's floor and, if `both`, in each; the batched "
        "floor leaves the fence checks out (at saturation rounds share them: how many per "
        "reply depends on the checks in flight)",
        "ops/reply: one message a reply; ledger pending + sent; the dedupe (claim, finish) "
        "and holds (the event's entry, its tombstone, the thread's watermark) changelog "
        "records; 4 fence checks at 50/s (before the "
        "pending record, the send, the sent record, the events' outcome; rounds share them "
        f"when checks overlap); faust's timer commit every {COMMIT_INTERVAL_S} s at {RATE}/s",
        "through confluent-kafka (librdkafka) instead of aiokafka, one at a time: a record "
        f"produced and acknowledged {floors['produce1_rd']:,.1f} µs (aiokafka "
        f"{floors['produce1']:,.1f}); a record consumed, one per fetch, "
        f"{floors['consume1_rd']:,.1f} µs (aiokafka {floors['consume1']:,.1f}; the feed's "
        f"produce taken off); an offset committed {floors['commit_rd']:,.1f} µs (aiokafka "
        f"{floors['commit']:,.1f}, on the consumer's loop)",
    ])  # fmt: skip


OPTIONS = (
    Opt("--ops", None, 2000, "Operations per round (batched and local steps)."),
    Opt("--single", None, 300, "Operations per round of the one-at-a-time Kafka steps."),
    Opt("--rounds", None, 5, "Rounds per step; the median is reported."),
    Opt("--sdk-calls", None, 1000, "SDK replies per round."),
)
main = command(
    Scenario("step-floors", "Worker steps measured alone", OPTIONS, Values, collect, report=report),
    "Each step of the worker alone (issue 46): CPU per operation and per reply.",
)


if __name__ == "__main__":
    main()
