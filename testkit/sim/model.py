"""SimModel: an async reply writer that behaves like a slow, fallible model, on virtual time.

Each call takes seconds to a minute and writes a new text; the world can make its next
calls fail, answer 429 (:class:`onceonly.ModelThrottled`) or hang past the writer's timeout.
Every call that wrote a text is kept as a :class:`testkit.invariants.WriterCall`.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from onceonly.processors.flow.rate import ModelThrottled
from onceonly.processors.writer.contract import Inbound
from testkit.invariants import WriterCall
from testkit.sim.io import current

Trace = Callable[[str, str], None]


class ModelFailed(RuntimeError):
    """The model's API answered 500."""


@dataclass(slots=True)
class ModelFaults:
    fail_next: int = 0
    throttle_next: int = 0
    hang_next: int = 0


class SimModel:
    def __init__(self, rng: random.Random, trace: Trace, hang_s: float = 600.0) -> None:
        self.rng = rng
        self.trace = trace
        self.hang_s = hang_s
        self.faults = ModelFaults()
        self.calls: list[WriterCall] = []
        #: when each call started (virtual seconds), whatever it then did
        self.starts: list[float] = []
        self._count = 0

    async def __call__(self, burst: Sequence[Inbound]) -> str:
        self._count += 1
        n = self._count
        self.starts.append(asyncio.get_running_loop().time())
        actor = current.get()
        who = actor.name if actor is not None else "-"
        latest = burst[-1].message_id
        faults = self.faults
        await asyncio.sleep(self.rng.uniform(1.0, 60.0))
        if actor is not None:
            await actor.awake()
        if faults.fail_next > 0:
            faults.fail_next -= 1
            self.trace(who, f"model call {n} for {latest} failed")
            raise ModelFailed("500 from the model")
        if faults.throttle_next > 0:
            faults.throttle_next -= 1
            wait = round(self.rng.uniform(1.0, 30.0), 3)
            self.trace(who, f"model call {n} for {latest} throttled {wait}s")
            raise ModelThrottled(wait)
        if faults.hang_next > 0:
            faults.hang_next -= 1
            self.trace(who, f"model call {n} for {latest} hangs")
            await asyncio.sleep(self.hang_s)
        text = f"text{n} for {latest}"
        self.calls.append(WriterCall(frozenset(m.key for m in burst), text))
        self.trace(who, f"model call {n} saw {[m.message_id for m in burst]} wrote {text!r}")
        return text
