"""``onceonly index`` on the real broker: built from the topics, answering the operator
commands, resuming from its own offsets after a restart, and saying when it is behind."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from onceonly.processors.writer.contract import reply_key
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from tests.integration.workers import INBOX, ROOT, Stack, onceonly

pytestmark = pytest.mark.integration


def _index(index_dir: Path | None) -> dict[str, str]:
    """The environment that points a command at ``index_dir`` (None: no index)."""
    return {} if index_dir is None else {"ONCEONLY_INDEX_DIR": str(index_dir)}


def _run(stack: Stack, index_dir: Path | None, *args: str) -> subprocess.CompletedProcess[str]:
    return onceonly(stack, *args, **_index(index_dir))


def _follower(stack: Stack, index_dir: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "onceonly", "index", "--follow", "--poll-s", "0.2"],
            env={**stack.env(stack.tmp / "cli", **_index(index_dir)), "COLUMNS": "200"},
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


async def _draft(stack: Stack, key: str, state: ReplyState = ReplyState.AWAITING) -> None:
    record = ReplyRecord(
        key, INBOX, f"<{key}@example.com>", f"agentmail:thr-{key}", state,
        datetime.now(UTC), reply_text=f"draft for {key}", reason="a refund",
    )  # fmt: skip
    await stack.producer.produce(stack.settings.ledger_topic, record.encode(), key=key.encode())


def _listed(stack: Stack, index_dir: Path) -> tuple[list[str], str]:
    done = _run(stack, index_dir, "approvals", "list", "--json")
    assert done.returncode == 0, done.stderr
    return [json.loads(line)["key"] for line in done.stdout.splitlines()], done.stderr


async def _until_listed(stack: Stack, index_dir: Path, keys: set[str]) -> str:
    deadline = time.monotonic() + 60
    last: tuple[list[str], str] = ([], "")
    while time.monotonic() < deadline:
        last = await asyncio.to_thread(_listed, stack, index_dir)
        if set(last[0]) == keys and "up to date" in last[1]:
            return last[1]
        await asyncio.sleep(0.5)
    raise AssertionError(f"the index never listed {sorted(keys)}; last: {last}")


async def test_the_index_answers_approvals_list_and_a_trace_built_from_the_topics(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory(reorder_window_ms=300)
    worker = stack.worker()
    await stack.deliver(stack.seed("<i1@example.com>", "thr-i1", event_id="evt-i1"))
    await stack.until_sent(1)
    worker.stop()  # the topics stay as they are: the index can be up to date
    for key in ("reply-d1", "reply-d2", "reply-d3"):
        await _draft(stack, key)
    await _draft(stack, "reply-d2", ReplyState.SENT)  # approved and sent: no longer waiting
    index_dir = stack.tmp / "index"

    built = _run(stack, index_dir, "index")
    listed, source = _listed(stack, index_dir)
    traced = _run(stack, index_dir, "trace", "evt-i1", "--json")
    scanned = _run(stack, None, "trace", "evt-i1", "--json")

    assert built.returncode == 0, built.stderr
    assert "index is up to date with the topics" in built.stdout
    assert listed == ["reply-d1", "reply-d3"]
    assert f"answered from the index at {index_dir}" in source and "up to date" in source
    assert traced.returncode == 0, traced.stderr
    trace, whole = json.loads(traced.stdout), json.loads(scanned.stdout)
    assert (trace["matched"], trace["outcome"]) == ("event_id", "answered")
    assert trace["reply_text"] == stack.mail.outbox[0].text
    assert trace["answered_by"].startswith(f"answered from the index at {index_dir}")
    assert whole["answered_by"].startswith("answered by scanning the topics")
    assert {k: v for k, v in trace.items() if k != "answered_by"} == {
        k: v for k, v in whole.items() if k != "answered_by"
    }
    by_key = _run(stack, index_dir, "trace", reply_key(INBOX, "<i1@example.com>"))
    assert by_key.returncode == 0 and "outcome: answered" in by_key.stdout, by_key.stderr


async def test_a_restarted_index_resumes_from_its_offsets_and_says_when_it_is_behind(
    stack_factory: Callable[..., Stack],
) -> None:
    stack = stack_factory()
    index_dir, log = stack.tmp / "index", stack.tmp / "index.log"
    for key in ("reply-r1", "reply-r2", "reply-r3"):
        await _draft(stack, key)
    first = _follower(stack, index_dir, log)
    try:
        await _until_listed(stack, index_dir, {"reply-r1", "reply-r2", "reply-r3"})
    finally:
        first.kill()
        first.wait(10)
    before = log.read_text()

    # while the index is down: two drafts, one sent
    await _draft(stack, "reply-r4")
    await _draft(stack, "reply-r5")
    await _draft(stack, "reply-r1", ReplyState.SENT)
    stale, source = await asyncio.to_thread(_listed, stack, index_dir)
    assert sorted(stale) == ["reply-r1", "reply-r2", "reply-r3"]  # what it had read
    assert f"index is 3 records behind the topics ({stack.settings.ledger_topic}: 3)" in source

    second = _follower(stack, index_dir, log)
    try:
        source = await _until_listed(
            stack, index_dir, {"reply-r2", "reply-r3", "reply-r4", "reply-r5"}
        )
    finally:
        second.kill()
        second.wait(10)
    after = log.read_text()[len(before) :]
    assert "index is up to date" in source
    # it read the three written while it was down, not the six the topic holds
    assert [line.split()[1] for line in after.splitlines() if line.startswith("indexed")] == ["3"]
    traced = _run(stack, index_dir, "trace", "reply-r1", "--json")
    assert traced.returncode == 0, traced.stderr
    [ledger] = json.loads(traced.stdout)["ledger"]
    assert ledger["record"]["state"] == "sent"  # written while the index was down
