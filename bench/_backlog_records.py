"""The backlog benchmark's records: one AgentMail ``message.received`` event per thread,
its text ``body_kb`` KB long, as the envelope ingest produces for it; and a tick's cost over
them held: one ``Holds.due_keys`` over one partition's share (at most :data:`MAX_HELD`
threads, all due), beside 1 KB bodies as the baseline (a dict as the table)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from datetime import UTC, datetime

from bench._backlog_figures import Plan, TickCost
from bench._load import thread_message
from bench._proc_records import Record, ingested

_LINE = (
    "We went through the onboarding notes again and wrote down every question the team "
    "still has about the migration, the billing contacts and the rollout dates.\n"
)


def body_text(n: int, size: int) -> str:
    """``size`` characters of plain text (ASCII: as many bytes), distinct for every ``n``."""
    head = f"Hi,\n\nthis is message {n} of the backlog.\n\n"
    filler = _LINE * (size // len(_LINE) + 1)
    return (head + filler)[:size]


def backlog_records(count: int, tag: str, body_kb: int) -> Iterator[Record]:
    """What ingest produces for ``count`` events, each the one message of a thread of its
    own (thread and Message-ID from ``tag`` and the index), its text ``body_kb`` KB."""
    now = datetime.now(UTC)
    size = body_kb * 1024
    for n in range(count):
        event = json.loads(thread_message(tag, n, now)[1])
        text = body_text(n, size)
        event["message"]["text"] = text  # the HTML part stays short: the body is the text
        event["message"]["preview"] = text[:120]
        event["message"]["size"] = size
        yield ingested(json.dumps(event), now)


#: Threads held for the measurement, at most (each holds a body in this process).
MAX_HELD = 2000
#: The bodies of the baseline, in KB.
BASELINE_KB = 1


def tick_ms(held: int, body_kb: int, window_ms: int = 2000, repeats: int = 3) -> float:
    """The best of ``repeats`` ``due_keys`` over ``held`` due threads of ``body_kb`` KB."""
    from onceonly.processors.reorder.holds import Delivery, Holds
    from onceonly.schemas.envelope import Envelope

    holds = Holds({}, window_ms, max_bytes=1 << 30)
    for i, (_, value, _) in enumerate(backlog_records(held, "tick", body_kb)):
        holds.hold(Delivery(Envelope.decode(value), (0, i)), now_ms=0)
    best = math.inf
    for _ in range(repeats):
        began = time.perf_counter()
        due = list(holds.due_keys(0, now_ms=window_ms + 1))
        best = min(best, time.perf_counter() - began)
    if len(due) != held:
        raise AssertionError(f"{len(due)} of {held} held threads were due")
    return best * 1000


def measure(plan: Plan) -> TickCost:
    """The tick's cost over one partition's share of ``plan``'s backlog, and its baseline."""
    held = max(1, min(MAX_HELD, math.ceil(plan.threads / plan.partitions)))
    window = plan.window_ms or 2000  # window 0 holds nothing: time the default's ticks
    return TickCost(
        held, plan.body_kb, tick_ms(held, plan.body_kb, window), tick_ms(held, BASELINE_KB, window)
    )
