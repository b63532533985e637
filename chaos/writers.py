"""The chaos run's reply writer: a slow model call with a new text every time.

The workers of a chaos run use ``ONCEONLY_REPLY_WRITER=chaos.writers:slow``. Each call
sleeps like a model that takes seconds (``CHAOS_WRITER_S``, e.g. ``1-8``), a share of them
(``CHAOS_WRITER_LONG_SHARE``) much longer (``CHAOS_WRITER_LONG_S``, e.g. ``30-60``), then
returns a text that no other call returns: two emails for one message show as two
texts, and a text recorded once and sent twice as one.

Every call is logged, as JSON lines, to ``CHAOS_WRITER_LOG_DIR/writer-<worker>-<pid>.jsonl``:
a ``start`` line (the call's id, the worker, the pid, the attempt, the reply keys and
message ids of the burst, the planned sleep) and an ``end`` line (the id and the text; no
text if the call was cancelled). The run reads them (``chaos/writer_log.py``) for the calls
in flight, which worker to pause, and the writer calls per message.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import os
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from chaos.approvals import REASON, SEED_VAR, SHARE_VAR, needs_approval
from onceonly.processors.writer.contract import Draft, Inbound

LOG_DIR_VAR = "CHAOS_WRITER_LOG_DIR"
SECONDS_VAR = "CHAOS_WRITER_S"
LONG_SECONDS_VAR = "CHAOS_WRITER_LONG_S"
LONG_SHARE_VAR = "CHAOS_WRITER_LONG_SHARE"

_OPENINGS = ("Hello", "Hi", "Good day", "Dear customer", "Thanks for writing", "Greetings")
_BODIES = (
    "we can meet on the day you proposed",
    "the afternoon suits us better, if that works for you",
    "let us find another day next week",
    "we have noted your message and will confirm soon",
    "a call might be quicker; we will send an invitation",
    "your question is with the right person now",
)


def parse_range(text: str) -> tuple[float, float]:
    """``"1-8"`` (or ``"5"``) as (low, high) seconds; raises ValueError."""
    low, sep, high = text.strip().partition("-")
    pair = (float(low), float(high) if sep else float(low))
    if pair[0] < 0 or pair[1] < pair[0]:
        raise ValueError(f"not a range of seconds: {text!r}")
    return pair


@dataclass(frozen=True)
class WriterConfig:
    seconds: tuple[float, float] = (1.0, 8.0)
    long_seconds: tuple[float, float] = (30.0, 60.0)
    long_share: float = 0.0
    log_dir: Path | None = None
    #: the share of the messages whose replies are drafts (--approvals), and the run's seed
    approval_share: float = 0.0
    approval_seed: int = 0

    @classmethod
    def from_env(cls, env: dict[str, str] | os._Environ[str] = os.environ) -> WriterConfig:
        log_dir = env.get(LOG_DIR_VAR)
        return cls(
            seconds=parse_range(env.get(SECONDS_VAR, "1-8")),
            long_seconds=parse_range(env.get(LONG_SECONDS_VAR, "30-60")),
            long_share=float(env.get(LONG_SHARE_VAR, "0")),
            log_dir=Path(log_dir) if log_dir else None,
            approval_share=float(env.get(SHARE_VAR, "0")),
            approval_seed=int(env.get(SEED_VAR, "0")),
        )

    def env(self) -> dict[str, str]:
        """The environment that gives a worker this configuration."""
        out = {
            SECONDS_VAR: f"{self.seconds[0]:g}-{self.seconds[1]:g}",
            LONG_SECONDS_VAR: f"{self.long_seconds[0]:g}-{self.long_seconds[1]:g}",
            LONG_SHARE_VAR: f"{self.long_share:g}",
        }
        if self.log_dir is not None:
            out[LOG_DIR_VAR] = str(self.log_dir)
        if self.approval_share > 0:
            out[SHARE_VAR] = f"{self.approval_share:g}"
            out[SEED_VAR] = str(self.approval_seed)
        return out

    def drafts(self, burst: Sequence[Inbound]) -> bool:
        """Whether this burst's reply is a draft: its latest message is in the share."""
        return needs_approval(self.approval_seed, burst[-1].message_id, self.approval_share)

    def draw(self, rng: random.Random) -> float:
        """One call's length, in seconds."""
        span = self.long_seconds if rng.random() < self.long_share else self.seconds
        return rng.uniform(*span)


def compose(burst: Sequence[Inbound], rng: random.Random) -> str:
    """A reply text no other call writes (a random token in it)."""
    latest = burst[-1]
    count = "your message" if len(burst) == 1 else f"your {len(burst)} messages"
    return (
        f"{rng.choice(_OPENINGS)},\n\nAbout {count}: {rng.choice(_BODIES)}.\n\n"
        f"(chaos writer, re {latest.message_id}, ref {uuid.uuid4().hex[:12]})"
    )


class _Log:
    """This process's log of writer calls (one file per process, lines flushed at once)."""

    def __init__(self, directory: Path | None) -> None:
        self.pid = os.getpid()
        self.worker = os.environ.get("ONCEONLY_WORKER_ID", "worker")
        self._ids = itertools.count(1)
        self._out: IO[str] | None = None
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / f"writer-{self.worker}-{self.pid}.jsonl"
            self._out = path.open("a", encoding="utf-8")

    def next_id(self) -> str:
        return f"{self.pid}-{next(self._ids)}"

    def write(self, line: dict[str, Any]) -> None:
        if self._out is not None:
            self._out.write(json.dumps(line, ensure_ascii=False) + "\n")
            self._out.flush()


@functools.cache
def _state() -> tuple[WriterConfig, _Log, random.Random]:
    config = WriterConfig.from_env()
    return config, _Log(config.log_dir), random.Random()


async def slow(burst: Sequence[Inbound]) -> str | Draft:
    """The chaos writer: seconds to a minute, a new text each call, every call logged; a
    ``Draft`` when the burst's latest message is in the approval share (--approvals)."""
    config, log, rng = _state()
    call = log.next_id()
    sleep_s = config.draw(rng)
    log.write(
        {
            "event": "start",
            "call": call,
            "t": time.time(),
            "worker": log.worker,
            "pid": log.pid,
            "attempt": int(getattr(burst, "attempt", 1)),
            "keys": [m.key for m in burst],
            "message_ids": [m.message_id for m in burst],
            "sleep_s": round(sleep_s, 3),
        }
    )
    try:
        await asyncio.sleep(sleep_s)
    except BaseException:  # cancelled (a rebalance dropped the job, a timeout): no text
        log.write({"event": "end", "call": call, "t": time.time(), "text": None})
        raise
    text = compose(burst, rng)
    draft = config.drafts(burst)
    log.write({"event": "end", "call": call, "t": time.time(), "text": text, "draft": draft})
    return Draft(text, reason=REASON) if draft else text
