"""The commands that act, and the operator page, answered from the index on the real
broker: approve (CLI) and POST /approvals/{key}, dead-letters list and retry, /ops.

The index is built once and not followed, so each test also shows what the index had
not read yet (the decision's outcome, a draft written after it, a retry's note) being
read from the topic's end: the commands act on what a whole read would find."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from onceonly.operations.trace import recent_skips
from onceonly.schemas.ledger import ReplyState
from tests.integration.operations.test_index import _run
from tests.integration.processors.test_approvals import TOKEN, _draft, _post
from tests.integration.workers import (
    Stack,
    dead_lettered,
    ledger_records,
    onceonly,
    until,
    writer_env,
)

pytestmark = pytest.mark.integration


def _built(stack: Stack, index_dir: Path) -> None:
    done = _run(stack, index_dir, "index")
    assert done.returncode == 0, done.stderr


async def test_a_draft_is_approved_from_the_cli_and_rejected_over_http_found_in_the_index(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=0)
    index_dir = stack.tmp / "index"
    worker = stack.worker(
        "w1",
        ONCEONLY_APPROVAL="always",
        ONCEONLY_OPS_TOKEN=TOKEN,
        ONCEONLY_INDEX_DIR=str(index_dir),
        **writer_env(stack),
    )
    first = await _draft(stack, "<a1@x>", "thr-a1")
    _built(stack, index_dir)  # holds the first draft; not followed from here on

    approved = await asyncio.to_thread(
        _run, stack, index_dir, "approvals", "approve", first.key, "--by", "ana"
    )
    second = await _draft(stack, "<a2@x>", "thr-a2")  # written after the index was built
    status, body = await asyncio.to_thread(
        _post, worker.port, second.key, {"action": "reject", "reason": "no", "by": "bot"}
    )

    assert approved.returncode == 0, approved.stderr
    answer = json.loads(approved.stdout)
    # applied and sent: the outcome was found among the records the index had not read
    assert (answer["status"], answer["state"], answer["decided_by"]) == ("applied", "sent", "ana")
    assert answer["answered_by"].startswith(f"answered from the index at {index_dir} and the ")
    assert answer["answered_by"].endswith(": as the topic is now")
    [email] = stack.mail.outbox
    assert (email.text, email.idempotency_key) == (first.reply_text, first.key)
    assert (status, body["status"], body["state"]) == (200, "applied", "declined"), body
    assert body["answered_by"].startswith(f"answered from the index at {index_dir} and the ")
    assert ledger_records(stack)[second.key].state is ReplyState.DECLINED
    await asyncio.sleep(1)  # the rejected draft is not sent: the approved one alone
    assert len(stack.mail.outbox) == 1


async def test_dead_letters_are_listed_and_retried_from_the_index_and_closed_once(
    dead_letter_stack: Stack,
) -> None:
    stack = dead_letter_stack
    index_dir = stack.tmp / "index"
    _built(stack, index_dir)

    listed = _run(stack, index_dir, "dead-letters", "list")
    done = _run(stack, index_dir, "dead-letters", "retry")
    await stack.until_sent(1)
    after = _run(stack, index_dir, "dead-letters", "list")  # the note: not in the index yet
    again = _run(stack, index_dir, "dead-letters", "retry")
    _built(stack, index_dir)
    rebuilt = _run(stack, index_dir, "dead-letters", "list")
    scanned = onceonly(stack, "dead-letters", "list")

    assert listed.returncode == 0, listed.stderr
    assert "1 open dead letter(s)" in listed.stdout, listed.stdout
    assert f"answered from the index at {index_dir}" in listed.stderr
    assert done.returncode == 0, done.stderr
    assert "from 1 dead letter(s)" in done.stdout
    assert "0 open dead letter(s)" in after.stdout, after.stdout + after.stderr
    assert "from 0 dead letter(s)" in again.stdout  # closed: not sent again
    assert "0 open dead letter(s)" in rebuilt.stdout
    assert "1 dead letter(s), 0 open" in scanned.stdout  # the whole read agrees
    await asyncio.sleep(2)
    assert [e.replied_to_message_id for e in stack.mail.outbox] == ["<dl@example.com>"]


def _page(port: int, ident: str) -> str:
    url = f"http://127.0.0.1:{port}/ops?trace={urllib.parse.quote(ident)}"
    with urllib.request.urlopen(url, timeout=60) as answer:
        return str(answer.read().decode())


async def test_the_operator_page_answers_its_skips_and_trace_from_the_index(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory()
    index_dir = stack.tmp / "index"
    worker = stack.worker(ONCEONLY_INDEX_DIR=str(index_dir))
    payload = stack.seed("<traced@example.com>", "thr-traced")
    await stack.deliver(payload)
    await stack.until_sent(1)
    before = await asyncio.to_thread(_page, worker.port, "<traced@example.com>")
    await stack.deliver(payload)  # the same event again: a duplicate, skipped and recorded
    await until(stack, lambda: bool(recent_skips(stack.settings, 10)), "the skip's record")
    _built(stack, index_dir)

    page = await asyncio.to_thread(_page, worker.port, "<traced@example.com>")

    assert "answered by scanning the topics (no index at" in before  # not built yet
    skips = page.split('id="skips"')[1].split('id="trace"')[0]
    trace = page.split('id="trace"')[1].split('id="usage"')[0]
    assert payload["event_id"] in skips and "duplicate" in skips
    # the worker may have written since (ticks): the line says how far behind, either way
    assert f"answered from the index at {index_dir}; index is " in skips
    assert "sent" in trace and "&lt;traced@example.com&gt;" in trace
    assert f"answered from the index at {index_dir}" in trace
    dead = page.split('id="dead-letters"')[1].split('id="approvals"')[0]
    assert "the open letters only, answered from the index" in dead
    # the model usage: the index's sums, not a day of the ledger read on every view
    assert "answered by reading today&#39;s ledger records" in before.split('id="usage"')[1]
    assert f"answered from the index at {index_dir}" in page.split('id="usage"')[1]


def _retry_on_page(port: int, letter: int) -> str:
    """POST the page's retry form with the token; the 303 is followed to the page."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/ops/dead-letters/{letter}/retry",
        data=urllib.parse.urlencode({"token": TOKEN}).encode(),
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return str(answer.read().decode())


async def test_a_dead_letter_retried_from_the_page_found_in_the_index_says_it_was_retried(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=0, send_attempts=1)
    index_dir = stack.tmp / "index"
    worker = stack.worker(ONCEONLY_INDEX_DIR=str(index_dir), ONCEONLY_OPS_TOKEN=TOKEN)
    key = await dead_lettered(stack, "<pg@example.com>", "thr-pg")
    _built(stack, index_dir)
    page = await asyncio.to_thread(_page, worker.port, key)
    [letter] = [int(x) for x in re.findall(r"/ops/dead-letters/(\d+)/retry", page)]

    after = await asyncio.to_thread(_retry_on_page, worker.port, letter)
    await stack.until_sent(1)

    assert f"dead letter {letter} retried at" in after  # closed by the note the index lacks
    assert "the open letters only, answered from the index" in after
    assert f"/ops/dead-letters/{letter}/retry" not in after  # no retry button: closed
    assert [e.replied_to_message_id for e in stack.mail.outbox] == ["<pg@example.com>"]
