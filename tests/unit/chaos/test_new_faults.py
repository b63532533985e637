"""The chaos run's lost webhooks, worker pauses, dead letters naming answered messages and
the options that turn the mail API's keys off (chaos/plan.py, chaos/pauses.py,
chaos/letters.py, chaos/run.py)."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import click
import pytest

from chaos.letters import LostFigures, named_keys, naming_answered
from chaos.options import KEYS_HONOURED, KEYS_IGNORED
from chaos.pauses import PauseRecord, pause_rows
from chaos.plan import build_plan, pause_faults
from chaos.run import main
from chaos.writer_log import Call
from onceonly.processors.writer.contract import reply_key

BASE = datetime(2026, 12, 1, tzinfo=UTC)


def plan(seed: int, lost: float) -> Any:
    return build_plan(
        messages=200,
        threads=20,
        inboxes=3,
        duplicates=0.3,
        out_of_order=0.2,
        rate=10.0,
        late_delay_s=20.0,
        rng=random.Random(seed),
        base=BASE,
        lost=lost,
    )


@pytest.mark.parametrize("seed", range(10))
def test_lost_webhooks_are_exact_never_duplicated_and_never_delivered(seed: int) -> None:
    got = plan(seed, 0.05)

    assert len(got.lost) == 10
    assert not got.lost & (got.concurrent | got.late_dups)
    assert {a.message.n for a in got.arrivals if a.lost} == got.lost
    assert all(a.copies == 0 for a in got.arrivals if a.message.n in got.lost)
    assert got.deliveries == plan(seed, 0.0).deliveries - 10


def test_no_loss_changes_nothing_else_of_the_plan() -> None:
    with_loss, without = plan(4, 0.05), plan(4, 0.0)

    assert without.lost == set()
    assert [a.message.n for a in with_loss.arrivals] == [a.message.n for a in without.arrivals]
    assert with_loss.late == without.late


@pytest.mark.parametrize("seed", range(20))
def test_pauses_fall_one_per_slice_of_the_fresh_load_and_last_as_asked(seed: int) -> None:
    faults = pause_faults(pauses=3, length_s=(15.0, 20.0), fresh_s=300.0, rng=random.Random(seed))

    assert len(faults) == 3
    for i, fault in enumerate(faults):
        assert 30.0 + i * 70.0 < fault.at_s < 30.0 + (i + 1) * 70.0
        assert 15.0 <= fault.length_s <= 20.0
    assert pause_faults(pauses=0, length_s=(15, 20), fresh_s=300.0, rng=random.Random()) == []


def test_the_longest_pause_survived_ignores_pauses_not_survived() -> None:
    calls = [Call("1", "w", 7, 1, ("k1", "k2"), 0.0, 5.0)]
    records = [
        PauseRecord("w1", 7, 80.0, 19.5, calls, survived=False),
        PauseRecord("w2", 8, 150.0, 16.2, [], survived=True),
        PauseRecord("w1", 9, 200.0, 17.0, [], survived=None),
    ]
    rows = dict(pause_rows(records, 3))

    assert rows["longest pause survived"].startswith("16.2 s")
    assert (
        "w1 at 80s for 19.5 s with 1 writer calls in flight, did NOT survive"
        in (rows["worker pauses (SIGSTOP)"])
    )
    assert records[0].keys == {"k1", "k2"}
    assert pause_rows([], 0) == []
    assert dict(pause_rows([], 2))["longest pause survived"].startswith("none")


def test_a_dead_letter_names_its_key_and_its_envelopes_messages() -> None:
    letter = {
        "check": "send_failed",
        "key": "reply-x",
        "record": {"key": "reply-y"},
        "envelopes": [
            {"account_id": "in@x", "message_id": "<a@x>"},
            {"account_id": None, "message_id": "<b@x>"},
            "junk",
        ],
    }

    assert named_keys(letter, reply_key) == {"reply-x", "reply-y", reply_key("in@x", "<a@x>")}
    answered = {reply_key("in@x", "<a@x>"): "<a@x> in in@x"}
    assert naming_answered([(4, letter), (5, {"check": "bad_mac"})], answered, reply_key) == [
        "offset 4 (send_failed) names answered <a@x> in in@x"
    ]


def test_lost_rows_only_when_webhooks_were_lost() -> None:
    assert LostFigures(0, 0, 0).rows() == []
    (row,) = LostFigures(3, 3, 2).rows()
    assert row[1].startswith("3 never delivered; 3 answered at the end, 2 by an email")


def options(*args: str) -> Any:
    """The Options chaos.run would run with (the command's parser, stopped before the run)."""
    import chaos.run as run

    seen: list[Any] = []
    original = run._options

    def capture(kwargs: dict[str, Any]) -> Any:
        seen.append(original(kwargs))
        raise SystemExit(0)

    run._options = capture
    try:
        with pytest.raises(SystemExit):
            main.main(list(args), standalone_mode=False)
    finally:
        run._options = original
    return seen[0]


def test_pauses_ignore_the_keys_and_drop_the_faults_only_keys_absorb() -> None:
    opts = options("--messages", "60", "--pauses", "1")

    assert opts.keys == KEYS_IGNORED
    assert (opts.kills, opts.broker_restarts, opts.lose_rate, opts.latency_spikes) == (0, 0, 0, 0)
    assert opts.pause_s == (15.0, 20.0) and opts.writer_long_s == (10.0, 20.0)
    assert opts.size == "60-messages-pauses-keys-ignored"
    assert "--pauses 1 --pause-s 15-20 --keys ignored" in opts.command()


def test_without_pauses_the_keys_are_honoured_and_the_old_faults_stay() -> None:
    opts = options("--window-ms", "2000")

    assert opts.keys == KEYS_HONOURED
    faults = (opts.kills, opts.broker_restarts, opts.lose_rate, opts.latency_spikes)
    assert faults == (5, 1, 0.02, 3)
    assert opts.writer_s == (1.0, 8.0) and opts.writer_long_s == (30.0, 60.0)
    assert opts.lost == 0.01 and opts.size == "full-window-2000"


def test_explicit_faults_win_over_the_keys_defaults() -> None:
    opts = options("--messages", "60", "--pauses", "1", "--kills", "2", "--keys", "honoured")

    assert opts.keys == KEYS_HONOURED and opts.kills == 2


@pytest.mark.parametrize(
    "args",
    [("--pause-s", "20-15"), ("--writer-long-s", "100-130"), ("--lost", "1.5")],
)
def test_bad_ranges_and_shares_are_refused(args: tuple[str, ...]) -> None:
    with pytest.raises(click.BadParameter):
        options("--messages", "60", *args)


def verdict(**changes: Any) -> Any:
    from pathlib import Path

    from chaos.figures import Figures, Span
    from chaos.load import LoadStats
    from chaos.stack import Snapshot
    from chaos.verdict import Verdict

    fields: dict[str, Any] = {
        "opts": options("--messages", "60", "--pauses", "1"),
        "messages": 2,
        "deliveries": 2,
        "load": LoadStats(),
        "out_of_order": 0,
        "concurrent": 0,
        "late": 0,
        "emails": 2,
        "answered": 2,
        "covered": 0,
        "missing": [],
        "doubled": {},
        "unexpected": {},
        "kills": [],
        "crashes": [],
        "broker_restarts": [],
        "figures": Figures(None, None, None, Span(0.0, 1.0), 2),
        "injected": {},
        "reply_calls": 2,
        "ledger_states": {"sent": 2},
        "dead_letters": 0,
        "worker_logs": {},
        "snapshots": [Snapshot("after the catch-up", 1.0, 2, True)],
        "phases": [],
        "replayed": "2",
        "catch_ups": [],
        "duration_s": 1.0,
        "started": BASE,
        "run_dir": Path("."),
    }
    fields.update(changes)
    return Verdict(**fields)


def test_a_dead_letter_naming_an_answered_message_fails_the_verdict() -> None:
    assert verdict().passed
    failed = verdict(letters_naming_answered=["offset 3 (send_failed) names answered <a@x>"])
    assert not failed.passed
    text = "\n".join(failed.lines())
    assert "naming answered messages: 1 (target 0)" in text
    assert "IGNORED: every reply call sends" in text
    assert not verdict(dead_letters=-1).passed
