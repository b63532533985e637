"""bench.profile_shares: which step a py-spy sample's stack is charged to."""

from __future__ import annotations

import gzip
from pathlib import Path

from click.testing import CliRunner

from bench.profile_shares import IDLE, main, parse, shares, step_of

ROOT = "<module> (onceonly/__main__.py:3);run_until_complete (asyncio/base_events.py:640)"
SEND = (
    f"{ROOT};Conversation.act (onceonly/processors/conversation.py:10);"
    "AgentMailSender.reply (onceonly/processors/mail/agentmail/sender.py:90);"
    "ClientSession._request (aiohttp/client.py:558);"
    "_SelectorSocketTransport.write (asyncio/selector_events.py:1057)"
)
HOLD = (
    f"{ROOT};Conversation.process (onceonly/processors/conversation.py:20);"
    "Holds.take (onceonly/processors/reorder/holds.py:187);"
    "FaustTable.get (onceonly/processors/runtime/tables.py:23);"
    "Store._get (faust/stores/rocksdb.py:300)"
)
PRODUCE = (
    f"{ROOT};Sender._send_produce_req (aiokafka/producer/sender.py:180);"
    "AIOKafkaConnection.send (aiokafka/conn.py:450)"
)
COMMIT = (
    f"{ROOT};GroupCoordinator._do_commit_offsets (aiokafka/consumer/group_coordinator.py:900);"
    "GroupCoordinator._send_req (aiokafka/consumer/group_coordinator.py:300);"
    "AIOKafkaConnection.send (aiokafka/conn.py:450)"
)
WAIT = (
    f"{ROOT};BaseEventLoop._run_once (asyncio/base_events.py:1900);"
    "EpollSelector.select (selectors.py:468)"
)


def frames(stack: str) -> list[tuple[str, str]]:
    return next(iter(parse([f"{stack} 1"])))[0]


def test_the_deepest_onceonly_step_wins_over_the_libraries_under_it() -> None:
    assert step_of(frames(SEND)) == "send through the mail SDK"
    # the rocksdb read under Holds.take is the hold's, not the generic table helper's
    assert step_of(frames(HOLD)) == "reorder hold"


def test_library_frames_name_the_step_when_no_onceonly_frame_does() -> None:
    assert step_of(frames(PRODUCE)).startswith("Kafka produce")
    # the coordinator's commit, not its generic heartbeat rule, although _send_req is deeper
    assert step_of(frames(COMMIT)) == "commit"


def test_a_wait_in_epoll_is_idle_and_left_out_of_the_shares() -> None:
    assert step_of(frames(WAIT)) == IDLE
    steps, _ = shares([f"{SEND} 3", f"{WAIT} 5"])
    assert steps == {"send through the mail SDK": 3, IDLE: 5}


def test_the_table_reads_a_gzipped_profile_and_charges_ms_per_reply(tmp_path: Path) -> None:
    raw = tmp_path / "p.raw.txt.gz"
    raw.write_bytes(gzip.compress(f"{SEND} 3\n{HOLD} 1\n{WAIT} 4\n".encode()))
    summary = tmp_path / "p.json"
    summary.write_text('{"ms_per_reply": 2.0}', encoding="utf-8")
    result = CliRunner().invoke(main, [str(raw), "--json", str(summary)])
    assert result.exit_code == 0, result.output
    assert "| send through the mail SDK | 3 | 75.0 % | 1.50 |" in result.output
    assert "| reorder hold | 1 | 25.0 % | 0.50 |" in result.output
    assert f"| {IDLE} | 4 |" in result.output
