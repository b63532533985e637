"""The load of a chaos run: signed deliveries POSTed to ingest as the plan says."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections import Counter
from dataclasses import dataclass, field

import aiohttp

from chaos.common import now
from chaos.figures import Answer
from chaos.options import Options
from chaos.plan import Arrival, Message, Plan
from testkit import signing

# --------------------------------------------------------------------------- the load


@dataclass
class LoadStats:
    attempts: int = 0
    accepted: int = 0  #: deliveries (copies included) that got a 2xx
    retried: int = 0  #: deliveries that needed more than one attempt
    statuses: Counter[str] = field(default_factory=Counter)
    never_accepted: list[str] = field(default_factory=list)
    done: int = 0  #: deliveries finished (accepted or given up)
    answers: list[Answer] = field(default_factory=list)  #: every POST's answer, in order


class Load:
    """Svix-like sender: signs at send time, retries anything but 2xx until a 204."""

    def __init__(
        self, url: str, plan: Plan, opts: Options, rng: random.Random, *, t_start: float
    ) -> None:
        self.url = url
        self.t_start = t_start  #: the run's start: answers are timed from it
        self._deliveries = itertools.count()
        self.plan = plan
        self.opts = opts
        self.rng = rng
        self.stats = LoadStats()
        self._slots = asyncio.Semaphore(opts.concurrency)

    async def run(self, t0: float) -> None:
        connector = aiohttp.TCPConnector(limit=self.opts.concurrency + 8)
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            previous: dict[int, asyncio.Event] = {}
            tasks = []
            for arrival in self.plan.arrivals:
                thread = arrival.message.thread
                done = asyncio.Event()
                tasks.append(
                    asyncio.create_task(
                        self._arrival(session, arrival, previous.get(thread), done, t0)
                    )
                )
                previous[thread] = done
            for arrival in self.plan.late:
                tasks.append(asyncio.create_task(self._arrival(session, arrival, None, None, t0)))
            await asyncio.gather(*tasks)

    async def _arrival(
        self,
        session: aiohttp.ClientSession,
        arrival: Arrival,
        before: asyncio.Event | None,
        done: asyncio.Event | None,
        t0: float,
    ) -> None:
        try:
            await asyncio.sleep(max(0.0, t0 + arrival.due_s - now()))
            if before is not None:
                await before.wait()  # the thread's previous delivery has its 204
            body = arrival.message.body
            await asyncio.gather(
                *(self._post(session, arrival.message, body) for _ in range(arrival.copies))
            )
        finally:
            if done is not None:
                done.set()

    async def _post(self, session: aiohttp.ClientSession, message: Message, body: bytes) -> None:
        deadline = now() + self.opts.delivery_timeout_s
        delivery = next(self._deliveries)
        attempt = 0
        while True:
            attempt += 1
            headers = signing.svix_headers(body, msg_id=message.svix_id)  # signed now
            status = "error"
            async with self._slots:
                self.stats.attempts += 1
                try:
                    async with session.post(self.url, data=body, headers=headers) as response:
                        await response.read()
                        status = str(response.status)
                except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                    status = type(exc).__name__
            self.stats.statuses[status] += 1
            accepted = status.startswith("2")
            self.stats.answers.append(Answer(delivery, now() - self.t_start, accepted))
            if accepted:
                self.stats.accepted += 1
                self.stats.done += 1
                if attempt > 1:
                    self.stats.retried += 1
                return
            if now() > deadline:
                self.stats.never_accepted.append(message.event_id)
                self.stats.done += 1
                return
            await asyncio.sleep(min(5.0, 0.25 * 2 ** min(attempt, 6)) * self.rng.uniform(0.5, 1.0))
