"""The plan of a chaos run: which messages, when, how often, in what order, which webhooks
are lost; when the broker faults and the worker pauses come, and which node of a cluster
the broker faults hit."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from chaos.common import iso
from onceonly.foundation.kafka import PartitionState
from testkit import payloads

# --------------------------------------------------------------------------- the plan

#: the fields of a webhook's message that the fake AgentMail server is not seeded with
_UNSEEDED = ("size", "created_at", "updated_at")


@dataclass(frozen=True, slots=True)
class Message:
    n: int
    thread: int
    k: int  #: its place in the thread, in payload time
    inbox_id: str
    thread_id: str
    message_id: str
    event_id: str
    timestamp: str
    sender: str
    text: str

    @property
    def svix_id(self) -> str:
        return f"msg_chaos_{self.n:06d}"

    @property
    def body(self) -> bytes:
        return payloads.dumps(self._event())

    def seed(self) -> dict[str, Any]:
        """The same message as the fake AgentMail server holds it (for replies, catch-up):
        the webhook's message but for what the fake works out itself."""
        message = self._event()["message"]
        return {name: value for name, value in message.items() if name not in _UNSEEDED}

    def _event(self) -> dict[str, Any]:
        return payloads.agentmail_received(
            event_id=self.event_id,
            inbox_id=self.inbox_id,
            thread_id=self.thread_id,
            message_id=self.message_id,
            timestamp=self.timestamp,
            sender=self.sender,
            text=self.text,
        )


@dataclass(frozen=True, slots=True)
class Arrival:
    message: Message
    due_s: float  #: seconds after the load starts
    copies: int = 1  #: 2: a concurrent duplicate; 0: a lost webhook, never delivered
    late: bool = False  #: a duplicate re-sent later, outside the thread's order

    @property
    def lost(self) -> bool:
        return self.copies == 0


@dataclass
class Plan:
    messages: list[Message]
    arrivals: list[Arrival]  #: first deliveries (and concurrent copies), in start order
    late: list[Arrival]  #: late duplicates, by due time
    out_of_order: set[int]  #: message numbers that arrive after a later one of their thread
    concurrent: set[int]
    late_dups: set[int]
    since: datetime  #: every message's payload time is at or after this
    lost: set[int]  #: message numbers whose webhook never comes (catch-up finds them)

    @property
    def deliveries(self) -> int:
        return sum(a.copies for a in self.arrivals) + len(self.late)

    @property
    def fresh_s(self) -> float:
        """When the last first delivery is due: new messages arrive until then."""
        return max((a.due_s for a in self.arrivals), default=0.0)

    @property
    def load_s(self) -> float:
        last = [a.due_s for a in self.arrivals] + [a.due_s for a in self.late]
        return max(last, default=0.0)


def _messages(
    sizes: list[int], inboxes: int, base: datetime
) -> tuple[list[list[Message]], list[Message]]:
    """Every thread's messages (one second apart in payload time), and all of them."""
    by_thread: list[list[Message]] = []
    flat: list[Message] = []
    for t, size in enumerate(sizes):
        row = []
        for k in range(size):
            at = base + timedelta(seconds=k, milliseconds=t % 1000)
            message = Message(
                n=len(flat),
                thread=t,
                k=k,
                inbox_id=f"chaos-{t % inboxes}@agentmail.to",
                thread_id=f"thr-chaos-{t:04d}",
                message_id=f"<chaos-t{t:04d}-m{k:03d}@example.com>",
                event_id=f"evt_chaos_{len(flat):06d}",
                timestamp=iso(at),
                sender=f"customer-{t:04d}@example.com",
                text=f"Message {k + 1} of thread {t}: can we meet on day {k + 1}?",
            )
            row.append(message)
            flat.append(message)
        by_thread.append(row)
    return by_thread, flat


def _orders(sizes: list[int], wanted: int, rng: random.Random) -> list[list[int]]:
    """Each thread's arrival order. Out of order: non-overlapping blocks k..k+j of one
    thread arrive as k+1..k+j, k, so exactly message k of each block arrives after a later
    message of its thread; ``wanted`` blocks at most."""
    candidates = [
        (t, k, j)
        for t, size in enumerate(sizes)
        for k in range(size)
        for j in (1, 2, 3)
        if k + j < size
    ]
    rng.shuffle(candidates)
    taken: set[tuple[int, int]] = set()
    orders = [list(range(size)) for size in sizes]
    moved = 0
    for t, k, j in candidates:
        if moved >= wanted:
            break
        cells = {(t, p) for p in range(k, k + j + 1)}
        if cells & taken:
            continue
        taken |= cells
        orders[t][k : k + j + 1] = [*range(k + 1, k + j + 1), k]
        moved += 1
    return orders


def _late_arrivals(orders: list[list[int]], by_thread: list[list[Message]]) -> set[int]:
    late: set[int] = set()
    for t, order in enumerate(orders):
        highest = -1
        for k in order:
            if k < highest:
                late.add(by_thread[t][k].n)
            highest = max(highest, k)
    return late


def build_plan(
    *,
    messages: int,
    threads: int,
    inboxes: int,
    duplicates: float,
    out_of_order: float,
    rate: float,
    late_delay_s: float,
    rng: random.Random,
    base: datetime,
    lost: float = 0.0,
) -> Plan:
    threads = max(1, min(threads, messages))
    inboxes = max(1, min(inboxes, threads))
    sizes = [messages // threads + (1 if t < messages % threads else 0) for t in range(threads)]
    by_thread, flat = _messages(sizes, inboxes, base)
    orders = _orders(sizes, round(out_of_order * messages), rng)
    late_arrivals = _late_arrivals(orders, by_thread)

    dup_count = round(duplicates * messages)
    chosen = rng.sample(range(messages), dup_count)
    concurrent = set(chosen[: dup_count // 2])
    late_dups = set(chosen[dup_count // 2 :])

    # A random interleaving of the threads that keeps each thread's arrival order.
    tokens = [t for t, size in enumerate(sizes) for _ in range(size)]
    rng.shuffle(tokens)
    cursor = [0] * threads
    arrivals: list[Arrival] = []
    due_of: dict[int, float] = {}
    for i, t in enumerate(tokens):
        message = by_thread[t][orders[t][cursor[t]]]
        cursor[t] += 1
        due = i / rate
        due_of[message.n] = due
        arrivals.append(Arrival(message, due, copies=2 if message.n in concurrent else 1))
    late = sorted(
        (
            Arrival(flat[n], due_of[n] + late_delay_s * rng.uniform(1.0, 1.5), late=True)
            for n in late_dups
        ),
        key=lambda a: a.due_s,
    )
    # Lost webhooks: messages delivered once (no duplicate could bring them), never sent.
    single = [n for n in range(messages) if n not in concurrent and n not in late_dups]
    gone = set(rng.sample(single, min(len(single), round(lost * messages)))) if lost else set()
    arrivals = [replace(a, copies=0) if a.message.n in gone else a for a in arrivals]
    return Plan(
        messages=flat,
        arrivals=arrivals,
        late=late,
        out_of_order=late_arrivals,
        concurrent=concurrent,
        late_dups=late_dups,
        since=base - timedelta(seconds=1),
        lost=gone,
    )


# --------------------------------------------------------------------------- worker pauses


@dataclass(frozen=True, slots=True)
class PauseFault:
    at_s: float  #: seconds after the load starts (the pause waits for writer calls in flight)
    length_s: float  #: how long the worker stays stopped


def pause_faults(
    *, pauses: int, length_s: tuple[float, float], fresh_s: float, rng: random.Random
) -> list[PauseFault]:
    """``pauses`` SIGSTOPs, one in each of as many equal slices of 10-80 % of the time new
    messages arrive (so writer calls are in flight, and the pauses do not overlap unless the
    load is short), each ``length_s`` long."""
    start, width = 0.10 * fresh_s, 0.70 * fresh_s / max(1, pauses)
    return [
        PauseFault(start + (i + rng.uniform(0.1, 0.9)) * width, rng.uniform(*length_s))
        for i in range(pauses)
    ]


# --------------------------------------------------------------------------- broker faults

#: the single broker: SIGTERM, --broker-down-s down, started again on its data
RESTART = "restart"
#: a cluster: SIGKILL of the node that leads the most deliveries partitions, restarted
#: after --broker-down-s on its data
LEADER_KILL = "leader kill"
#: a cluster: every node in turn SIGTERMed and started again, the next one only once the
#: partitions are all in sync again
ROLLING_RESTART = "rolling restart"


@dataclass(frozen=True, slots=True)
class BrokerFault:
    at_s: float  #: seconds after the load starts
    kind: str  #: RESTART, LEADER_KILL or ROLLING_RESTART


def broker_faults(
    *,
    nodes: int,
    restarts: int,
    leader_kills: int,
    window_s: float,
    fresh_s: float,
    rng: random.Random,
) -> list[BrokerFault]:
    """When the broker faults come, in order (they run one after the other).

    One node: ``restarts`` restarts in the middle half of the load (``window_s``, late
    duplicates included). A cluster: ``leader_kills`` leader kills in 20-35 % of the time
    new messages arrive (``fresh_s``), then ``restarts`` rolling restarts from 45-55 % of
    it, so both hit while replies are due and a stall shows in the gap between emails.
    """
    if nodes == 1:
        times = [rng.uniform(0.25, 0.75) * window_s for _ in range(restarts)]
        return [BrokerFault(at, RESTART) for at in sorted(times)]
    kills = [
        BrokerFault(rng.uniform(0.20, 0.35) * fresh_s, LEADER_KILL) for _ in range(leader_kills)
    ]
    rolls = [
        BrokerFault(rng.uniform(0.45, 0.55) * fresh_s, ROLLING_RESTART) for _ in range(restarts)
    ]
    return sorted(kills + rolls, key=lambda f: f.at_s)


def busiest_leader(states: Iterable[PartitionState], topic: str) -> tuple[int, int] | None:
    """The node that leads the most partitions of ``topic`` and how many it leads (a tie
    goes to the lowest node id); None if no partition has a leader."""
    led = Counter(s.leader for s in states if s.topic == topic and s.leader >= 0)
    if not led:
        return None
    node, count = min(led.items(), key=lambda item: (-item[1], item[0]))
    return node, count


def led_elsewhere(states: Iterable[PartitionState], topic: str, node: int) -> bool:
    """Every partition of ``topic`` has a leader, and none is ``node`` (a new election
    is over); False if the snapshot holds no partition of ``topic``."""
    mine = [s for s in states if s.topic == topic]
    return bool(mine) and all(s.leader >= 0 and s.leader != node for s in mine)


def under_replicated(states: Iterable[PartitionState]) -> int:
    """Partitions with fewer replicas in sync than they have (0: the cluster is whole)."""
    return sum(1 for s in states if len(set(s.isr)) < len(s.replicas))
