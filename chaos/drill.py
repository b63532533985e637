"""One chaos run: the stack, the load, the faults, the phases (replay, catch-up)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import time
from datetime import UTC, datetime
from typing import Any

import aiohttp

from chaos.broker_faults import BrokerFaults
from chaos.common import (
    CATCH_UP_LINE,
    ChaosError,
    first_of,
    now,
)
from chaos.decider import Decider
from chaos.judge import Judge
from chaos.load import Load
from chaos.pauses import Pauses
from chaos.plan import BrokerFault, PauseFault, Plan, broker_faults, build_plan, pause_faults
from chaos.stack import OPS_TOKEN, Snapshot
from chaos.verdict import Verdict


class Chaos(BrokerFaults, Pauses, Judge):
    """One chaos run: the stack, the load, the faults, and the verdict."""

    #: when (s into the load) the kills, broker faults, latency spikes and pauses happen
    _times: tuple[list[float], list[BrokerFault], list[float], list[PauseFault]] = (
        [],
        [],
        [],
        [],
    )

    async def inject_faults(self, spikes: list[float], t0: float) -> None:
        """Every second: random latency, and 5xx / lost responses for a share of the reply
        calls of the last second; a spike holds every call longer than the send timeout."""
        last_replies = 0
        last_fail = last_lose = 0
        pending_spikes = sorted(spikes)
        spike_s = self.opts.send_timeout_s + 1.0
        while not self._stop.is_set():
            stats = await self._stats()
            faults = stats["faults"]
            self.injected["5xx"] += max(0, last_fail - int(faults["fail_remaining"]))
            self.injected["lost"] += max(0, last_lose - int(faults["lose_remaining"]))
            replies = int(stats["requests"].get("reply", 0))
            calls = max(0, replies - last_replies)
            last_replies = replies
            last_fail = sum(self.rng.random() < self.opts.fail_rate for _ in range(calls))
            last_lose = sum(self.rng.random() < self.opts.lose_rate for _ in range(calls))
            latency = self.rng.uniform(0.0, self.opts.latency_ms / 1000)
            if pending_spikes and now() >= t0 + pending_spikes[0]:
                pending_spikes.pop(0)
                latency = spike_s
                self.injected["spikes"] += 1
                self.event(f"latency spike: {spike_s:g} s on every AgentMail call for 1 s")
            await self._mail(
                "POST",
                "/_control/faults",
                {
                    "latency_s": latency,
                    "fail_next": last_fail,
                    "fail_status": self.rng.choice([500, 502, 503]),
                    "lose_response_next": last_lose,
                },
            )
            await asyncio.sleep(1.0)
        await self._mail(
            "POST", "/_control/faults", {"latency_s": 0, "fail_next": 0, "lose_response_next": 0}
        )

    async def kill_workers(self, times: list[float], t0: float) -> None:
        for at in sorted(times):
            await asyncio.sleep(max(0.0, t0 + at - now()))
            alive = [w for w in self.workers if w.alive and w.name not in self.paused]
            if not alive:
                continue
            worker = self.rng.choice(alive)
            pid = worker.pid
            worker.kill()
            self.kills.append(f"{worker.name} at {self.elapsed():.0f}s")
            worker.start()
            self.event(
                f"SIGKILL worker {worker.name} (pid {pid}); restarted as pid {worker.pid} "
                f"with the same data dir and worker id"
            )

    async def report_progress(self, every_s: float = 15.0) -> None:
        while not self._stop.is_set():
            await asyncio.sleep(every_s)
            await self.status_line()

    async def status_line(self) -> None:
        stats = await self._stats()
        lag = await self._lag()
        load = self.load.stats if self.load is not None and self.plan is not None else None
        planned = self.plan.deliveries if self.plan is not None else 0
        sent = f"deliveries {load.done}/{planned}, {load.attempts} POSTs" if load else ""
        alive = sum(w.alive for w in self.workers)
        await asyncio.to_thread(self.writer_log.refresh)
        writing = len(self.writer_log.in_flight(w.pid for w in self.workers))
        self.event(
            f"status: {sent}, emails {stats['sent']}, reply calls "
            f"{stats['requests'].get('reply', 0)}, writer calls {len(self.writer_log.calls)} "
            f"({writing} in flight), lag {'?' if lag is None else lag}, "
            f"workers up {alive}/{len(self.workers)}"
        )

    # ---------------------------------------------------------------- phases

    async def wait_quiet(self, phase: str) -> Snapshot:
        """Until the consumer lag has been 0, no writer call in flight, and the outbox and the
        reply calls unchanged, for a while (10 s, or three reorder windows)."""
        stable_s = max(10.0, 3 * self.opts.window_ms / 1000)
        deadline = now() + self.opts.drain_timeout_s
        last: tuple[int, int] | None = None
        since = now()
        quiet = False
        while True:
            stats = await self._stats()
            now_counts = (int(stats["sent"]), int(stats["requests"].get("reply", 0)))
            lag = await self._lag(trace=True)
            await asyncio.to_thread(self.writer_log.refresh)
            writing = self.writer_log.in_flight(w.pid for w in self.workers if w.alive)
            deciding = self.decider is not None and self.decider.busy
            if now_counts != last or lag != 0 or writing or self.broker_busy or deciding:
                last, since = now_counts, now()
            if now() - since >= stable_s:
                quiet = True
                break
            if now() > deadline:
                self.event(
                    f"{phase}: NOT quiet within {self.opts.drain_timeout_s:g} s "
                    f"(lag {lag}, emails {now_counts[0]})"
                )
                break
            await asyncio.sleep(2.0)
        snapshot = Snapshot(phase, self.elapsed(), last[0] if last else 0, quiet)
        self.snapshots.append(snapshot)
        self.event(f"{phase}: quiet={quiet}, emails {snapshot.emails}")
        return snapshot

    def _make_plan(self) -> Plan:
        opts = self.opts
        plan = build_plan(
            messages=opts.messages,
            threads=opts.threads,
            inboxes=opts.inboxes,
            duplicates=opts.duplicates,
            out_of_order=opts.out_of_order,
            rate=opts.rate,
            late_delay_s=opts.late_duplicate_delay_s,
            rng=self.rng,
            base=datetime.now(UTC).replace(microsecond=0),
            lost=opts.lost,
        )
        self.event(
            f"plan: {len(plan.messages)} messages, {plan.deliveries} deliveries "
            f"({len(plan.concurrent)} concurrent and {len(plan.late_dups)} late duplicates), "
            f"{len(plan.out_of_order)} out of order, {len(plan.lost)} webhooks lost, load over "
            f"{plan.load_s:.0f} s, seed {opts.seed}"
        )
        return plan

    def _fault_times(
        self, plan: Plan
    ) -> tuple[list[float], list[BrokerFault], list[float], list[PauseFault]]:
        """When (s into the load) the kills, broker faults, latency spikes and pauses happen."""
        opts = self.opts
        window = plan.load_s
        kills = [self.rng.uniform(0.05, 0.95) * window for _ in range(opts.kills)]
        brokers = broker_faults(
            nodes=opts.nodes,
            restarts=opts.broker_restarts,
            leader_kills=opts.leader_kills,
            window_s=window,
            fresh_s=plan.fresh_s,
            rng=self.rng,
        )
        spikes = [self.rng.uniform(0.05, 0.95) * window for _ in range(opts.latency_spikes)]
        pauses = pause_faults(
            pauses=opts.pauses, length_s=opts.pause_s, fresh_s=plan.fresh_s, rng=self.rng
        )
        self.event(
            "faults planned at (s into the load): kills "
            + ", ".join(f"{t:.0f}" for t in sorted(kills))
            + "; broker faults "
            + ", ".join(f"{f.kind} {f.at_s:.0f}" for f in brokers)
            + "; latency spikes "
            + ", ".join(f"{t:.0f}" for t in sorted(spikes))
            + "; pauses "
            + ", ".join(f"{p.at_s:.0f} for {p.length_s:.0f} s" for p in pauses)
        )
        return kills, brokers, spikes, pauses

    async def _replay_phase(self, background: list[asyncio.Task[Any]]) -> None:
        code, out = await self._cli("replay", "replay", "--from-offset", "0")
        found = re.search(r"replayed (\d+) records", out)
        self.replayed = found.group(1) if found else f"exit {code}"
        self.event(f"onceonly replay --from-offset 0: exit {code}, {self.replayed} records")
        if code != 0:
            raise ChaosError(f"onceonly replay failed (exit {code}):\n{out[-3000:]}")
        await first_of(self.wait_quiet("after the replay"), background)

    async def _catch_up_phase(self, plan: Plan, background: list[asyncio.Task[Any]]) -> None:
        since = plan.since.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.catch_up_wall = time.time()
        # long enough for a burst's writer calls (the longest, retried) and its send
        wait_s = f"{max(120.0, 3 * self.opts.writer_calls_longest_s + 30):g}"
        # one command per inbox, all at once, as operators catching up a whole account would
        inboxes = sorted({m.inbox_id for m in plan.messages})
        args = ("catch-up", "--since", since, "--wait-s", wait_s)
        # a log of its own each: _cli returns what follows its header in the log
        runs = await asyncio.gather(
            *(self._cli(f"catch-up-{n}", *args, "--inbox", i) for n, i in enumerate(inboxes))
        )
        for inbox, (code, out) in zip(inboxes, runs, strict=True):
            found = CATCH_UP_LINE.search(out)
            line = found.group(0).strip() if found else f"exit {code}"
            self.event(f"onceonly catch-up --inbox {inbox} --since {since}: {line}")
            if code != 0 or found is None:
                why = f"exit {code}" if code != 0 else "no summary line this run can read"
                raise ChaosError(f"onceonly catch-up failed ({why}):\n{out[-3000:]}")
            self.catch_ups.append([int(g) for g in found.groups()])
        await first_of(self.wait_quiet("after the catch-up"), background)

    async def _phases(self, plan: Plan, background: list[asyncio.Task[Any]], t0: float) -> None:
        """The load with its faults, the drain, the replay and the catch-up, each timed."""
        assert self.load is not None
        kills, brokers, _, pauses = self._times
        phase_t = t0
        chaos = asyncio.gather(
            self.load.run(t0),
            self.kill_workers(kills, t0),
            self.broker_faults(brokers, t0),
            self.pause_workers(pauses, t0),
        )
        await first_of(chaos, background)
        self.load_span = (t0 - self.t_start, now() - self.t_start)
        stats = self.load.stats
        self.event(
            f"load done: {stats.accepted} deliveries accepted, "
            f"{stats.attempts} POSTs, {dict(stats.statuses)}"
        )
        self.phases.append(("load and faults", now() - phase_t))
        for name, step in (
            ("drain", lambda: first_of(self.wait_quiet("after the load"), background)),
            ("replay", lambda: self._replay_phase(background)),
            ("catch-up", lambda: self._catch_up_phase(plan, background)),
        ):
            phase_t = now()
            await step()
            self.phases.append((name, now() - phase_t))

    async def run(self) -> Verdict:
        self._session = aiohttp.ClientSession()
        try:
            self.plan = plan = self._make_plan()
            phase_t = now()
            await self.setup()
            self.phases.append(("set-up", now() - phase_t))
            self._times = self._fault_times(plan)
            self.load = Load(
                f"http://127.0.0.1:{self.ingest_port}/webhooks/agentmail",
                plan,
                self.opts,
                self.rng,
                t_start=self.t_start,
            )
            t0 = now()
            background = [
                asyncio.create_task(self.supervise()),
                asyncio.create_task(self.inject_faults(self._times[2], t0)),
                asyncio.create_task(self.report_progress()),
            ]
            if self.opts.approvals:
                self.decider = Decider(
                    rng=random.Random(self.opts.seed + 1),
                    session=self._session,
                    urls=self.worker_urls,
                    token=OPS_TOKEN,
                    cli=self._cli,
                    run_dir=self.run_dir,
                    elapsed=self.elapsed,
                )
                background.append(asyncio.create_task(self.decider.run()))
            try:
                await self._phases(plan, background, t0)
            finally:
                self._stop.set()
                for task in background:
                    task.cancel()
                await asyncio.gather(*background, return_exceptions=True)
                with contextlib.suppress(Exception):
                    await self._mail(
                        "POST",
                        "/_control/faults",
                        {"latency_s": 0, "fail_next": 0, "lose_response_next": 0},
                    )
            return await self.verdict()
        finally:
            await self._session.close()

    # ---------------------------------------------------------------- the verdict
