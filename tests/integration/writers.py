"""Reply writers loaded by worker processes in tests (ONCEONLY_REPLY_WRITER)."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from onceonly.processors.writer.contract import Inbound


def unique(burst: Sequence[Inbound]) -> str:
    """A text that differs on every call, so a second call could never pass unnoticed."""
    text = f"reply {uuid.uuid4().hex} to {len(burst)} message(s) of {burst[-1].message_id}"
    log = os.environ.get("ONCEONLY_TEST_WRITER_LOG")
    if log:
        with open(log, "a") as out:
            out.write(text + "\n")
    return text


async def count_receipts(envelope: Any, effects: Any) -> None:
    """An event handler: one 'receipt' per Stripe invoice.paid, counted in a file."""
    event = envelope.payload()
    if event.get("type") != "invoice.paid":
        return
    log = os.environ["ONCEONLY_TEST_EFFECT_LOG"]

    def send(key: str) -> str:
        with open(log, "a") as out:
            out.write(key + "\n")
        return "receipt-sent"

    await effects.once("send_receipt", {"invoice": event["data"]["object"]["id"]}, send)


def echo(burst: Sequence[Inbound]) -> str:
    """Shows what the writer was given: each message's id and text, in the order given."""
    return " | ".join(f"{m.message_id}: {m.text}" for m in burst)


def _log_call(event: str, burst: Sequence[Inbound]) -> None:
    """One JSON line per call: what happened, when, and which messages the call saw."""
    path = os.environ.get("ONCEONLY_TEST_WRITER_LOG")
    if path:
        ids = [m.message_id for m in burst]
        line = {
            "event": event,
            "at": time.time(),
            "ids": ids,
            "pid": os.getpid(),
            "attempt": getattr(burst, "attempt", 1),
        }
        with open(path, "a") as out:
            out.write(json.dumps(line) + "\n")


def _calls_for(message_id: str) -> int:
    path = os.environ.get("ONCEONLY_TEST_WRITER_LOG")
    if not path or not os.path.exists(path):
        return 0
    with open(path) as lines:
        return sum(
            1
            for line in lines
            if (entry := json.loads(line))["event"] == "start" and entry["ids"][-1] == message_id
        )


async def model(burst: Any) -> Any:
    """A model-like async writer, steered by the latest message's text.

    ``ALWAYS-FAIL`` raises every time, ``FAIL-ONCE`` raises on the first call only,
    ``HANG`` never returns, ``SLOW=<s>`` takes that long, ``DECLINE`` returns None,
    ``EFFECT`` labels the message once through ``burst.effects``, ``HISTORY`` writes the
    thread's earlier messages into the reply. Otherwise it takes
    ``ONCEONLY_TEST_WRITER_DELAY_S`` (default 0.2 s), after waiting at the gate
    (:func:`_gate`) when ``ONCEONLY_TEST_WRITER_GATE`` is set.
    """
    latest = burst[-1]
    text = latest.text or ""
    _log_call("start", burst)
    delay = float(os.environ.get("ONCEONLY_TEST_WRITER_DELAY_S", "0.2"))
    if "SLOW=" in text:
        delay = float(text.split("SLOW=", 1)[1].split()[0])
    if "EFFECT" in text:
        await burst.effects.once("label", {"message": latest.message_id}, _record_effect)
    try:
        await _gate()
        await asyncio.sleep(3600 if "HANG" in text else delay)
    except asyncio.CancelledError:
        _log_call("cancelled", burst)
        raise
    if "ALWAYS-FAIL" in text or ("FAIL-ONCE" in text and _calls_for(latest.message_id) <= 1):
        _log_call("raise", burst)
        raise RuntimeError("429 Too Many Requests (the model's rate limit)")
    _log_call("end", burst)
    if "DECLINE" in text:
        return None
    if "HISTORY" in text:
        earlier = await burst.history()
        return "history: " + " ".join(f"{m.message_id}{'(own)' if m.own else ''}" for m in earlier)
    text = f"reply to {latest.message_id} covering {len(burst)} message(s)"
    if os.environ.get("ONCEONLY_TEST_WRITER_VARY"):  # a sampled model: never the same text
        text += f" ({uuid.uuid4().hex[:8]})"
    return text


async def _gate() -> None:
    """The n-th call (the n-th start in the writer's log) waits until the file
    ONCEONLY_TEST_WRITER_GATE names holds a number of at least n: the test lets the calls
    through one by one (or all at once). Unset: no wait."""
    gate = os.environ.get("ONCEONLY_TEST_WRITER_GATE")
    if not gate:
        return
    call = _starts()
    while _let_through(gate) < call:
        await asyncio.sleep(0.1)


def _let_through(gate: str) -> int:
    """How many calls the gate lets through (0: none yet; a file being written reads so)."""
    try:
        return int(Path(gate).read_text().strip() or 0)
    except FileNotFoundError:
        return 0


def _starts() -> int:
    """How many calls the writer's log records begun (this one's included)."""
    with open(os.environ["ONCEONLY_TEST_WRITER_LOG"]) as lines:
        return sum(1 for line in lines if json.loads(line)["event"] == "start")


def _record_effect(key: str) -> str:
    with open(os.environ["ONCEONLY_TEST_EFFECT_LOG"], "a") as out:
        out.write(key + "\n")
    return "labelled"


def sync_model(burst: Any) -> str:
    """A plain sync writer that blocks for ONCEONLY_TEST_WRITER_DELAY_S (time.sleep)."""
    _log_call("start", burst)
    time.sleep(float(os.environ.get("ONCEONLY_TEST_WRITER_DELAY_S", "2")))
    _log_call("end", burst)
    return f"reply to {burst[-1].message_id}"


def sync_effect(burst: Any) -> str:
    """A sync writer that labels the message once through ``effects.once_sync``."""
    _log_call("start", burst)
    burst.effects.once_sync("label", {"message": burst[-1].message_id}, _record_effect)
    _log_call("end", burst)
    return f"reply to {burst[-1].message_id}"
