"""Worker pauses: a worker SIGSTOPped while its writer (model) calls are in flight, for longer
than its broker session (10 s), then SIGCONTed.

While it is stopped the group gives its partitions to the other worker, which reads the
records the stopped one had not finished and puts them to the writer again; when it
continues, its writer calls return at once (their timers ran out while it was stopped)
and it must not record or send what it no longer owns. With the mail API's keys ignored
(``--keys ignored``) a second send is a second email, so the verdict counts what onceonly
itself prevents.
"""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass

from chaos.common import now
from chaos.plan import PauseFault
from chaos.processes import Proc
from chaos.stack import Stack
from chaos.writer_log import Call

#: a pause waits at most this long for a worker with writer calls in flight
WAIT_FOR_CALLS_S = 30.0
#: a paused worker survived if it still runs, the same process, this long after it continued
WATCH_S = 30.0
#: the workers' broker session (onceonly/processors/runtime/app.py: broker_session_timeout)
SESSION_S = 10.0


@dataclass
class PauseRecord:
    worker: str
    pid: int | None
    at_s: float  #: s since the run started
    length_s: float  #: measured: from the SIGSTOP to the SIGCONT
    calls: list[Call]  #: the worker's writer calls in flight when it was stopped
    survived: bool | None = None  #: None: not known (the run ended, or the plan killed it)
    note: str = ""

    @property
    def keys(self) -> set[str]:
        return {key for call in self.calls for key in call.keys}

    def describe(self) -> str:
        fate = {True: "survived", False: "did NOT survive", None: "not known"}[self.survived]
        return (
            f"{self.worker} at {self.at_s:.0f}s for {self.length_s:.1f} s with "
            f"{len(self.calls)} writer calls in flight, {fate}"
            + (f" ({self.note})" if self.note else "")
        )


def pause_rows(pauses: list[PauseRecord], planned: int) -> list[tuple[str, str]]:
    if not planned:
        return []
    survived = [p.length_s for p in pauses if p.survived]
    return [
        (
            "worker pauses (SIGSTOP)",
            f"{len(pauses)} of {planned}: " + ("; ".join(p.describe() for p in pauses) or "-"),
        ),
        (
            "longest pause survived",
            (f"{max(survived):.1f} s" if survived else "none")
            + f" (the workers' broker session is {SESSION_S:g} s)",
        ),
    ]


class Pauses(Stack):
    """The pause faults, one after the other as chaos.plan.pause_faults planned them."""

    async def pause_workers(self, faults: list[PauseFault], t0: float) -> None:
        for fault in faults:
            await asyncio.sleep(max(0.0, t0 + fault.at_s - now()))
            await self._pause_one(fault)

    async def _busiest(self) -> tuple[Proc | None, list[Call]]:
        """The live, unpaused worker with the most writer calls in flight; waits up to
        WAIT_FOR_CALLS_S for one that has any."""
        deadline = now() + WAIT_FOR_CALLS_S
        while True:
            await asyncio.to_thread(self.writer_log.refresh)
            best: tuple[Proc | None, list[Call]] = (None, [])
            for worker in self.workers:
                if worker.alive and worker.name not in self.paused:
                    calls = self.writer_log.in_flight([worker.pid])
                    if best[0] is None or len(calls) > len(best[1]):
                        best = (worker, calls)
            if best[1] or now() > deadline:
                return best
            await asyncio.sleep(0.25)

    async def _pause_one(self, fault: PauseFault) -> None:
        worker, calls = await self._busiest()
        if worker is None:
            self.event("pause: no live worker to pause; skipped")
            return
        pid = worker.pid
        record = PauseRecord(worker.name, pid, self.elapsed(), 0.0, calls)
        self.pause_records.append(record)
        self.paused.add(worker.name)
        stopped = now()
        worker.signal(signal.SIGSTOP)
        self.event(
            f"SIGSTOP worker {worker.name} (pid {pid}) with {len(calls)} writer calls in "
            f"flight, for {fault.length_s:.1f} s (its session is {SESSION_S:g} s)"
        )
        try:
            await asyncio.sleep(fault.length_s)
        finally:
            worker.signal(signal.SIGCONT)
            record.length_s = now() - stopped
        self.event(f"SIGCONT worker {worker.name} (pid {pid}) after {record.length_s:.1f} s")
        try:
            await self._watch(worker, pid, record)
        finally:
            self.paused.discard(worker.name)

    async def _watch(self, worker: Proc, pid: int | None, record: PauseRecord) -> None:
        """Survived: the same process still runs WATCH_S after it continued."""
        crashes = len(self.crashes)
        until = now() + WATCH_S
        while now() < until and not self._stop.is_set():
            if worker.pid != pid or not worker.alive:
                break
            await asyncio.sleep(0.5)
        if worker.pid == pid and worker.alive:
            record.survived = True if now() >= until else None
            record.note = "" if record.survived else "the run ended while it was watched"
        elif len(self.crashes) > crashes or not worker.alive:
            record.survived = False
            record.note = "it exited on its own after it continued"
        else:
            record.note = "replaced by another process"
        self.event(f"pause of {worker.name}: {record.describe()}")
