"""The backlog benchmark's records: one AgentMail ``message.received`` event per thread,
its text ``body_kb`` KB long, as the envelope ingest produces for it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

from bench._load import agentmail_body
from bench._proc_records import Record, as_record

_LINE = (
    "We went through the onboarding notes again and wrote down every question the team "
    "still has about the migration, the billing contacts and the rollout dates.\n"
)


def message_id(tag: str, n: int) -> str:
    """The Message-ID of the backlog's ``n``-th thread (what the mail server counts by)."""
    return f"<{tag}-{n:06d}@mail.example.com>"


def body_text(n: int, size: int) -> str:
    """``size`` characters of plain text (ASCII: as many bytes), distinct for every ``n``."""
    head = f"Hi,\n\nthis is message {n} of the backlog.\n\n"
    filler = _LINE * (size // len(_LINE) + 1)
    return (head + filler)[:size]


def backlog_records(count: int, tag: str, body_kb: int) -> Iterator[Record]:
    """What ingest produces for ``count`` events, each the one message of a thread of its
    own (thread and Message-ID from ``tag`` and the index), its text ``body_kb`` KB."""
    from onceonly.ingest import normalise

    now = datetime.now(UTC)
    size = body_kb * 1024
    for n in range(count):
        event = json.loads(
            agentmail_body(n, now, thread_id=f"thr_{tag}_{n:06d}", message_id=message_id(tag, n))
        )
        text = body_text(n, size)
        event["message"]["text"] = text  # the HTML part stays short: the body is the text
        event["message"]["preview"] = text[:120]
        event["message"]["size"] = size
        envelope = normalise.agentmail(json.dumps(event), {}, now)
        yield as_record(envelope)
