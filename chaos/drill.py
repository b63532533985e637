"""One chaos run: the stack, the load, the faults, the phases (replay, catch-up)."""

from __future__ import annotations

import asyncio
import contextlib
import re
from datetime import UTC, datetime

import aiohttp

from chaos.common import (
    CATCH_UP_LINE,
    ChaosError,
    now,
)
from chaos.judge import Judge
from chaos.load import Load
from chaos.plan import build_plan
from chaos.stack import Snapshot, first_of
from chaos.verdict import Verdict


class Chaos(Judge):
    """One chaos run: the stack, the load, the faults, and the verdict."""

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
            alive = [w for w in self.workers if w.alive]
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

    async def restart_broker(self, times: list[float], t0: float) -> None:
        for at in sorted(times):
            await asyncio.sleep(max(0.0, t0 + at - now()))
            self.broker_busy = True
            try:
                self.event("broker: stopping (SIGTERM)")
                started = now()
                await asyncio.to_thread(self.broker.stop)
                self.event(f"broker: stopped in {now() - started:.1f} s")
                await asyncio.sleep(self.opts.broker_down_s)
                await asyncio.to_thread(self.broker.start_and_wait)
                down = now() - started
                self.broker_restarts.append(f"at {self.elapsed() - down:.0f}s, down {down:.0f}s")
                self.event(f"broker: back on {self.bootstrap} after {down:.1f} s")
            finally:
                self.broker_busy = False

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
        self.event(
            f"status: {sent}, emails {stats['sent']}, reply calls "
            f"{stats['requests'].get('reply', 0)}, lag {'?' if lag is None else lag}, "
            f"workers up {alive}/{len(self.workers)}"
        )

    # ---------------------------------------------------------------- phases

    async def wait_quiet(self, phase: str) -> Snapshot:
        """Until the consumer lag has been 0, and the outbox and the reply calls unchanged,
        for a while (10 s, or three reorder windows)."""
        stable_s = max(10.0, 3 * self.opts.window_ms / 1000)
        deadline = now() + self.opts.drain_timeout_s
        last: tuple[int, int] | None = None
        since = now()
        quiet = False
        while True:
            stats = await self._stats()
            now_counts = (int(stats["sent"]), int(stats["requests"].get("reply", 0)))
            lag = await self._lag(trace=True)
            if now_counts != last or lag != 0 or self.broker_busy:
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

    async def run(self) -> Verdict:
        opts = self.opts
        self._session = aiohttp.ClientSession()
        try:
            base = datetime.now(UTC).replace(microsecond=0)
            self.plan = build_plan(
                messages=opts.messages,
                threads=opts.threads,
                inboxes=opts.inboxes,
                duplicates=opts.duplicates,
                out_of_order=opts.out_of_order,
                rate=opts.rate,
                late_delay_s=opts.late_duplicate_delay_s,
                rng=self.rng,
                base=base,
            )
            plan = self.plan
            self.event(
                f"plan: {len(plan.messages)} messages, {plan.deliveries} deliveries "
                f"({len(plan.concurrent)} concurrent and {len(plan.late_dups)} late duplicates), "
                f"{len(plan.out_of_order)} out of order, load over {plan.load_s:.0f} s, seed "
                f"{opts.seed}"
            )
            phase_t = now()
            await self.setup()
            self.phases.append(("set-up", now() - phase_t))

            # the load, with the faults at random moments of it
            window = plan.load_s
            kill_times = [self.rng.uniform(0.05, 0.95) * window for _ in range(opts.kills)]
            broker_times = [
                self.rng.uniform(0.25, 0.75) * window for _ in range(opts.broker_restarts)
            ]
            spike_times = [
                self.rng.uniform(0.05, 0.95) * window for _ in range(opts.latency_spikes)
            ]
            self.event(
                "faults planned at (s into the load): kills "
                + ", ".join(f"{t:.0f}" for t in sorted(kill_times))
                + "; broker restarts "
                + ", ".join(f"{t:.0f}" for t in sorted(broker_times))
                + "; latency spikes "
                + ", ".join(f"{t:.0f}" for t in sorted(spike_times))
            )
            self.load = Load(
                f"http://127.0.0.1:{self.ingest_port}/webhooks/agentmail", plan, opts, self.rng
            )
            t0 = now()
            phase_t = t0
            background = [
                asyncio.create_task(self.supervise()),
                asyncio.create_task(self.inject_faults(spike_times, t0)),
                asyncio.create_task(self.report_progress()),
            ]
            try:
                chaos = asyncio.gather(
                    self.load.run(t0),
                    self.kill_workers(kill_times, t0),
                    self.restart_broker(broker_times, t0),
                )
                await first_of(chaos, background)
                self.event(
                    f"load done: {self.load.stats.accepted} deliveries accepted, "
                    f"{self.load.stats.attempts} POSTs, {dict(self.load.stats.statuses)}"
                )
                self.phases.append(("load and faults", now() - phase_t))

                phase_t = now()
                await first_of(self.wait_quiet("after the load"), background)
                self.phases.append(("drain", now() - phase_t))

                phase_t = now()
                code, out = await self._cli("replay", "replay", "--from-offset", "0")
                found = re.search(r"replayed (\d+) records", out)
                self.replayed = found.group(1) if found else f"exit {code}"
                self.event(f"onceonly replay --from-offset 0: exit {code}, {self.replayed} records")
                if code != 0:
                    raise ChaosError(f"onceonly replay failed (exit {code}):\n{out[-3000:]}")
                await first_of(self.wait_quiet("after the replay"), background)
                self.phases.append(("replay", now() - phase_t))

                phase_t = now()
                since = plan.since.strftime("%Y-%m-%dT%H:%M:%S%z")
                for inbox in sorted({m.inbox_id for m in plan.messages}):
                    code, out = await self._cli(
                        "catch-up",
                        "catch-up",
                        "--inbox",
                        inbox,
                        "--since",
                        since,
                        "--wait-s",
                        "120",
                    )
                    found = CATCH_UP_LINE.search(out)
                    line = found.group(0).strip() if found else f"exit {code}"
                    if found:
                        self.catch_ups.append([int(g) for g in found.groups()])
                    self.event(f"onceonly catch-up --inbox {inbox} --since {since}: {line}")
                    if code != 0:
                        raise ChaosError(f"onceonly catch-up failed (exit {code}):\n{out[-3000:]}")
                await first_of(self.wait_quiet("after the catch-up"), background)
                self.phases.append(("catch-up", now() - phase_t))
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
