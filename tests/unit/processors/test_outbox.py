"""The dry-run outbox records every field of a reply, and answers a repeat like the API."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from onceonly.processors.mail.outbox import DryRunOutbox
from onceonly.schemas.ledger import ReplyRecord, ReplyState

AT = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def _record() -> ReplyRecord:
    return ReplyRecord(
        "reply-k", "s@x", "<m@x>", "agentmail:t", ReplyState.PENDING, AT, "hi", message_at=AT
    )


async def test_a_dry_run_reply_is_one_json_line_with_every_field(tmp_path: Path) -> None:
    outbox = DryRunOutbox(tmp_path / "outbox.jsonl")

    await outbox.reply(_record())

    [line] = (tmp_path / "outbox.jsonl").read_text().splitlines()
    entry = json.loads(line)
    assert (entry["key"], entry["message_at"]) == ("reply-k", AT.isoformat())


async def test_a_repeat_is_answered_with_the_first_send(tmp_path: Path) -> None:
    outbox = DryRunOutbox(tmp_path / "outbox.jsonl")

    first = await outbox.reply(_record())
    again = await outbox.reply(_record())

    assert first == again
    assert len((tmp_path / "outbox.jsonl").read_text().splitlines()) == 1
