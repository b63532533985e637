"""A schedule: everything a simulated run does, drawn from ``random.Random(seed)``.

Messages (at least 50, in 10 to 20 threads over two inboxes) arrive over fifteen minutes
of virtual time; at least five faults fall among them: a member killed (and restarted
after a while), paused (past its session or not), paused right after an ownership check
(the window the fence cannot reach), a rebalance, mail answers lost or 5xx, model calls
failing, throttled (429) or hanging past the writer's timeout. A quarter of the schedules
run against a mail API that ignores idempotency keys, never with a pause placed right
after a check (that window is not covered with keys ignored, docs/guarantees.md) nor a
lost answer (finding F2: the send is retried without reading the thread first), and with
1-2 pauses past the session right after a member's write of a *pending* record, before
its send asks the fence (``_after_writes``, from a generator of their own).

About a quarter of the schedules (drawn from a second generator, so the others are the
schedules they were before approvals were simulated) require approval: every reply is a
draft, and 6 to 14 ``decide`` events have people approve, edit or reject a waiting draft,
sometimes two at once or from two places, or the same decision twice
(:mod:`testkit.sim.approvals`).

Half the schedules have 1-3 messages whose webhook is lost (:attr:`Schedule.lost`) and 1 or
2 ``catch_up`` events (the operator's ``onceonly catch-up``) among the others, drawn from a
fourth generator (:mod:`testkit.sim.catchup`).

Half the schedules have 1-4 ``redeliver`` events: a message's webhook delivered again, a
provider's retry, or a lost one's at last, late (:data:`REDELIVERY_DELAYS_S`), drawn from a
fifth generator (:mod:`testkit.sim.events`).

Every schedule has 1 to 3 ``retry`` events (the operator's ``onceonly dead-letters
retry``) and half of them a ``forge`` event (a letter planted on the dead-letter topic),
drawn from a third generator (:mod:`testkit.sim.letters`).

Half the schedules hold deliveries for a reorder window (``ONCEONLY_REORDER_WINDOW_MS``:
the default 2 s in two of three, 15 s in the third, so that a thread's messages meet in one
buffer), drawn from a seventh generator (:mod:`testkit.sim.holding`); the others run at
window 0. :attr:`Reorder.mode` (``--window``) draws it, or sets it for every schedule.

Half the schedules have 1-2 ``replay`` events, the operator's ``onceonly replay`` of the
deliveries partition from a drawn offset to its end (:mod:`testkit.sim.replay`), from an
eighth generator.

Half the schedules have 1-2 ``failover`` events (the changelogs' leader gone for 1-30 s) and
half of those a ``produce_expiry`` (10-240 s in which every ledger write fails, landed or
not; played only with ``--expiries``), drawn from a sixth generator (:mod:`testkit.sim.broker`).

:class:`Bugs` are test-only switches of the simulated world that plant a known bug, to
show the simulator catches it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import ClassVar

from onceonly.processors.writer.contract import Inbound

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
SPAN_S = 900.0  #: messages arrive over this much virtual time
APPROVAL_SHARE = 0.25  #: of the schedules, the share that require approval
WINDOW_SHARE = 0.5  #: of the schedules, the share that hold deliveries for a reorder window
REPLAY_SHARE = 0.5  #: of the schedules, the share in which the operator replays a range
#: the reorder windows drawn (ms): the default twice as often as a long one
WINDOWS_MS = (2000, 2000, 15000)

#: fault kinds, and how each draws its argument
KINDS = (
    "kill",
    "pause",
    "pause_after_check",
    "rebalance",
    "mail_5xx",
    "mail_lost",
    "model_fail",
    "model_429",
    "model_hang",
)


@dataclass(frozen=True, slots=True)
class Bugs:
    """Planted bugs (none by default)."""

    #: (a) the mail sender is not fenced: a send is not preceded by an ownership check
    no_fence_before_send: bool = False
    #: (b) the pending record is written after the send, not before
    ledger_after_send: bool = False
    #: (c) every schedule's mail API ignores keys, pauses after a check included
    keys_ignored: bool = False
    #: (d) a member commits every offset it fetched, its lanes' work done or not
    commit_before_done: bool = False
    #: (e) the writer is given only a burst's latest message; the reply covers them all
    writer_sees_latest_only: bool = False
    #: (f) a decision on a draft is applied without the check that one was applied before
    #: or that a newer message superseded the draft
    approval_applied_twice: bool = False
    #: (g) the operator's dead-letter retry sends every envelope of the open letters signed
    #: with the secret, without checking the letter's MACs (a forged letter is laundered)
    dead_letter_no_mac_check: bool = False
    #: (h) each worker paces its writer calls at the group's whole ONCEONLY_MODEL_RPM, not at
    #: its partitions' share (the rate world, :mod:`testkit.sim.rates`, only)
    group_rate_per_worker: bool = False

    @property
    def any(self) -> bool:
        return any(getattr(self, name) for name in self.__dataclass_fields__)


class Reorder:
    """The reorder window of every schedule: ``drawn`` (per seed), ``off`` (window 0) or
    ``on`` (a window drawn for every seed); set by ``--window``, forked jobs too."""

    mode: ClassVar[str] = "drawn"


class Replays:
    """Whether the ``replay`` events drawn are in the schedules (``--no-replays``: left out,
    the schedules as they were before replays were simulated)."""

    on: ClassVar[bool] = True


class Cuts:
    """Whether the ``cut_kafka`` and ``cut_mail`` faults drawn are in the schedules
    (``--no-cuts``: left out, the schedules as they were before cuts were simulated), and
    whether a cut from the mail API holds a member's thread and message reads too, as it
    holds its sends and ``find_reply`` (on by default since 2026-12-07: findings F43-F46
    were found with them, and are fixed; ``--no-read-cuts``: sends alone)."""

    on: ClassVar[bool] = True
    reads: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class Fault:
    at: float
    kind: str
    arg: float


@dataclass(frozen=True)
class Schedule:
    seed: int
    bugs: Bugs = Bugs()
    #: None: drawn (a quarter of the seeds); False for a seed kept from before approvals
    #: were simulated (its regression test replays the schedule it found its bug with)
    require_approval: bool | None = None
    #: a sub-schedule (:mod:`testkit.sim.shrink`): the faults (by index in the drawn, sorted
    #: faults) and messages (by index, ``<m12@sim>`` is 12) left out after everything is drawn
    drop_faults: frozenset[int] = frozenset()
    drop_messages: frozenset[int] = frozenset()
    messages: tuple[Inbound, ...] = field(init=False)
    arrivals: tuple[float, ...] = field(init=False)
    faults: tuple[Fault, ...] = field(init=False)
    ignore_keys: bool = field(init=False)
    #: replies are drafts a person decides on (the ``decide`` faults)
    approval: bool = field(init=False)
    #: messages whose webhook never comes (they reach the inbox; catch-up finds them)
    lost: frozenset[str] = field(init=False)
    #: the reorder window (ms; 0: deliveries go to their lanes as they come)
    window_ms: int = field(init=False)

    def __post_init__(self) -> None:
        rng = random.Random(self.seed)
        threads = rng.randint(10, 20)
        count = rng.randint(50, 70)
        arrivals = sorted(round(rng.uniform(0.0, SPAN_S), 3) for _ in range(count))
        weights = [rng.uniform(0.2, 3.0) for _ in range(threads)]
        messages = []
        for index, at in enumerate(arrivals):
            thread = rng.choices(range(threads), weights)[0]
            inbox = f"inbox{thread % 2}@sim"
            messages.append(
                Inbound(
                    inbox_id=inbox,
                    message_id=f"<m{index}@sim>",
                    thread_key=f"agentmail:t{thread}",
                    thread_id=f"t{thread}",
                    event_id=f"ev{index}",
                    occurred_at=EPOCH + timedelta(seconds=at),
                    sender="customer@example.com",
                    subject=f"question {thread}",
                    text=f"message {index}",
                    labels=("received",),
                )
            )
        ignore = self.bugs.keys_ignored or rng.random() < 0.25
        # keys ignored: no lost answer (finding F2: retried without reading the thread, it
        # sends again) and, unless planted, no pause right after a check (not covered)
        kinds = [k for k in KINDS if not (ignore and k in ("pause_after_check", "mail_lost"))]
        if self.bugs.keys_ignored:
            kinds = ["pause_after_check", "pause", *kinds]  # zombies
        faults = [
            Fault(round(rng.uniform(0.0, SPAN_S * 1.1), 3), kind, draw_arg(rng, kind))
            for kind in (rng.choice(kinds) for _ in range(rng.randint(5, 9)))
        ]
        approval = random.Random(self.seed * 7907 + 5)
        drawn = approval.random() < APPROVAL_SHARE
        required = drawn if self.require_approval is None else self.require_approval
        object.__setattr__(self, "approval", required)
        if self.approval:
            faults += _decisions(approval)
        faults += _operations(random.Random(self.seed * 7933 + 17))
        if ignore:
            faults += _after_writes(random.Random(self.seed * 7963 + 29))
        catch_ups, lost = _catch_ups(random.Random(self.seed * 8017 + 43), messages)
        faults += catch_ups
        faults += _redeliveries(random.Random(self.seed * 8053 + 59), arrivals)
        faults += _broker_faults(random.Random(self.seed * 8081 + 71))
        object.__setattr__(self, "window_ms", _window(random.Random(self.seed * 8111 + 83)))
        replays = _replays(random.Random(self.seed * 8147 + 89))
        faults += replays if Replays.on else []
        cuts = _cuts(random.Random(self.seed * 8171 + 101), mail=not ignore)
        faults += cuts if Cuts.on else []
        object.__setattr__(self, "lost", lost)
        object.__setattr__(self, "messages", tuple(messages))
        object.__setattr__(self, "arrivals", tuple(arrivals))
        object.__setattr__(self, "faults", tuple(sorted(faults, key=lambda f: f.at)))
        object.__setattr__(self, "ignore_keys", ignore)
        if self.drop_faults or self.drop_messages:
            self._drop()

    def _drop(self) -> None:
        """Leave out the dropped faults and messages; the others are drawn as they were."""
        kept = [i for i in range(len(self.messages)) if i not in self.drop_messages]
        object.__setattr__(self, "messages", tuple(self.messages[i] for i in kept))
        object.__setattr__(self, "arrivals", tuple(self.arrivals[i] for i in kept))
        faults = (f for i, f in enumerate(self.faults) if i not in self.drop_faults)
        object.__setattr__(self, "faults", tuple(faults))

    def by_index(self, index: int) -> Inbound | None:
        """Message ``index`` as drawn (``<m{index}@sim>``), None where it was dropped."""
        wanted = f"<m{index}@sim>"
        return next((m for m in self.messages if m.message_id == wanted), None)

    @property
    def end(self) -> float:
        return max([*self.arrivals, *(f.at for f in self.faults)], default=0.0)


def _decisions(rng: random.Random) -> list[Fault]:
    """The people's ``decide`` events; the argument: which of ``approvals.VARIANTS``."""
    return [
        Fault(round(rng.uniform(30.0, SPAN_S * 1.1), 3), "decide", float(rng.randrange(6)))
        for _ in range(rng.randint(6, 14))
    ]


def _operations(rng: random.Random) -> list[Fault]:
    """The operator's ``retry`` events (``onceonly dead-letters retry``), and in half the
    schedules a ``forge`` event: a letter planted on the dead-letter topic (the argument:
    its MAC under another key, 0, or none, 1). From a generator of their own: the other
    draws are the ones they were before (:mod:`testkit.sim.letters`)."""
    faults = [
        Fault(round(rng.uniform(120.0, SPAN_S * 1.3), 3), "retry", 0.0)
        for _ in range(rng.randint(1, 3))
    ]
    if rng.random() < 0.5:
        faults.append(Fault(round(rng.uniform(0.0, SPAN_S), 3), "forge", float(rng.randrange(2))))
    return faults


def _catch_ups(rng: random.Random, messages: list[Inbound]) -> tuple[list[Fault], frozenset[str]]:
    """In half the schedules, 1-3 messages whose webhook is lost and 1 or 2 ``catch_up``
    events: from a generator of their own, so the other draws are the ones they were before."""
    faults = [
        Fault(round(rng.uniform(60.0, SPAN_S * 1.2), 3), "catch_up", 0.0)
        for _ in range(rng.randint(1, 2))
    ]
    lost: frozenset[str] = frozenset()
    if rng.random() < 0.5:
        lost = frozenset(m.message_id for m in rng.sample(messages, rng.randint(1, 3)))
    # catch-ups only where webhooks were lost: elsewhere a message a worker lost (the
    # planted commit-before-done) stays unanswered for the checker, not healed
    return (faults if lost else []), lost


#: when a provider delivers a webhook again, after the first delivery (Svix's retries
#: come after 5 s, 5 min, 30 min, 2 h, ...; the first delivery's answer was lost or late)
REDELIVERY_DELAYS_S = (0.0, 5.0, 300.0, 1800.0)


def _redeliveries(rng: random.Random, arrivals: list[float]) -> list[Fault]:
    """In half the schedules, 1-4 ``redeliver`` events: a message's webhook delivered again
    (the argument: its index), at one of a provider's retry delays after the message
    arrived, with up to a tenth of it again as jitter. A lost webhook's is its first
    delivery, late. From a generator of their own, so the other draws are the ones they
    were before."""
    if rng.random() >= 0.5:
        return []
    faults = []
    for _ in range(rng.randint(1, 4)):
        index = rng.randrange(len(arrivals))
        delay = rng.choice(REDELIVERY_DELAYS_S)
        at = arrivals[index] + delay + rng.uniform(0.0, max(0.5, delay / 10))
        faults.append(Fault(round(at, 3), "redeliver", float(index)))
    return faults


def _broker_faults(rng: random.Random) -> list[Fault]:
    """In half the schedules, 1-2 failovers (the argument: seconds) and, in half of those,
    a while (the argument: seconds) in which every ledger write expires, from a generator of
    their own, so the other draws are the ones they were before (:mod:`testkit.sim.broker`)."""
    if rng.random() >= 0.5:
        return []
    faults = [
        Fault(round(rng.uniform(0.0, SPAN_S * 1.1), 3), "failover", round(rng.uniform(1, 30), 3))
        for _ in range(rng.randint(1, 2))
    ]
    if rng.random() < 0.5:
        at = round(rng.uniform(0.0, SPAN_S * 1.1), 3)
        faults.append(Fault(at, "produce_expiry", round(rng.uniform(10, 240), 3)))
    return faults


def _replays(rng: random.Random) -> list[Fault]:
    """In half the schedules, 1-2 ``replay`` events (the operator's ``onceonly replay``; the
    argument: where its range starts, as a share of the partition's records so far), from a
    generator of their own (:mod:`testkit.sim.replay`)."""
    if rng.random() >= REPLAY_SHARE:
        return []
    return [
        Fault(round(rng.uniform(60.0, SPAN_S * 1.2), 3), "replay", round(rng.random(), 3))
        for _ in range(rng.randint(1, 2))
    ]


def _cuts(rng: random.Random, mail: bool) -> list[Fault]:
    """In half the schedules, 1-2 ``cut_kafka`` faults (the argument: seconds, past the
    session in nine of ten): a member cut off from the broker while the mail API and the
    model still answer it; and in half, independently, 1-2 ``cut_mail`` (5-300 s): cut off
    from the mail API while the broker answers it (:meth:`testkit.sim.world.World.cut`);
    from a generator of their own. ``mail`` False (keys ignored): no ``cut_mail``, drawn and
    left out, as lost answers are (a send that timed out is retried unread: finding F2)."""
    faults = []
    for kind, seconds in (("cut_kafka", (1, 100)), ("cut_mail", (5, 300))):
        if rng.random() < 0.5:
            drawn = [
                Fault(
                    round(rng.uniform(0.0, SPAN_S * 1.1), 3), kind, round(rng.uniform(*seconds), 3)
                )
                for _ in range(rng.randint(1, 2))
            ]
            faults += drawn if mail or kind != "cut_mail" else []
    return faults


def _window(rng: random.Random) -> int:
    """The reorder window (:attr:`Reorder.mode`), from a generator of its own."""
    held = rng.random() < WINDOW_SHARE
    window = rng.choice(WINDOWS_MS)
    return window if {"drawn": held, "on": True, "off": False}[Reorder.mode] else 0


def _after_writes(rng: random.Random) -> list[Fault]:
    """With keys ignored, 1-2 pauses past the session placed right after a member's write of
    a *pending* record, before its send (the send's own ownership check stops it; a send
    without that check doubles): from a generator of their own, so the other draws are the
    ones they were before."""
    return [
        Fault(
            round(rng.uniform(0.0, SPAN_S * 1.1), 3),
            "pause_after_write",
            draw_arg(rng, "pause_after_check"),  # past the session, as that pause is
        )
        for _ in range(rng.randint(1, 2))
    ]


def draw_arg(rng: random.Random, kind: str) -> float:
    match kind:
        case "kill":
            return round(rng.uniform(0.5, 30.0), 3)  # until the restart
        case "pause":
            return round(rng.uniform(1.0, 120.0), 3)
        case "pause_after_check":
            return round(rng.uniform(11.0, 120.0), 3)  # past the session
        case "mail_5xx" | "model_fail":
            return float(rng.randint(1, 4))
        case "mail_lost" | "model_429":
            return float(rng.randint(1, 3))
        case "model_hang":
            return 1.0
    return 0.0
