"""Reply writers loaded by worker processes in tests (ONCEONLY_REPLY_WRITER)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from typing import Any

from processors.reply import Inbound


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
