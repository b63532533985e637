"""The chaos run's approval mode (chaos/approvals.py): which replies are drafts, what the
decider chooses, and the judge of what was sent against what was approved."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path

import pytest

from chaos import writers
from chaos.approvals import (
    APPROVE,
    APPROVE_AND_EDIT,
    REJECT,
    Decision,
    choose,
    edited,
    judge,
    needs_approval,
)
from chaos.writers import WriterConfig
from onceonly.processors.writer.contract import Draft
from onceonly.schemas.ledger import ReplyRecord, ReplyState
from tests.unit.chaos._messages import inbound

# --------------------------------------------------------------------------- which drafts


def test_the_share_is_about_right_the_same_everywhere_and_depends_on_the_seed() -> None:
    ids = [f"<m{n}@x>" for n in range(5000)]
    chosen = [i for i in ids if needs_approval(7, i, 0.2)]

    assert 0.18 < len(chosen) / len(ids) < 0.22
    assert chosen == [i for i in ids if needs_approval(7, i, 0.2)]  # every process agrees
    assert chosen != [i for i in ids if needs_approval(8, i, 0.2)]
    assert not any(needs_approval(7, i, 0.0) for i in ids)
    assert all(needs_approval(7, i, 1.0) for i in ids)


def test_the_config_carries_the_share_and_seed_through_the_environment() -> None:
    config = WriterConfig((0.5, 2.0), (10.0, 20.0), 0.25, None, 0.3, 41)

    assert WriterConfig.from_env(config.env()) == config


async def test_the_slow_writer_drafts_exactly_the_bursts_whose_latest_message_is_chosen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = WriterConfig((0.0, 0.0), (0.0, 0.0), 0.0, tmp_path, 0.5, 3)
    for name, value in config.env().items():
        monkeypatch.setenv(name, value)
    writers._state.cache_clear()
    try:
        out = {n: await writers.slow([inbound(0), inbound(n)]) for n in range(1, 40)}
    finally:
        writers._state.cache_clear()

    drafted = {n for n, reply in out.items() if isinstance(reply, Draft)}
    assert drafted == {n for n in out if needs_approval(3, f"<m{n}@x>", 0.5)}
    assert 0 < len(drafted) < len(out)
    assert all(isinstance(out[n], str) for n in set(out) - drafted)


def test_choices_reject_edit_and_double_in_their_shares() -> None:
    rng = random.Random(5)
    choices = [choose(rng, delay_s=(1.0, 2.0)) for _ in range(4000)]

    rejects = sum(c.action == REJECT for c in choices) / len(choices)
    doubled = sum(c.twice != "once" for c in choices) / len(choices)
    assert 0.17 < rejects < 0.23 and 0.27 < doubled < 0.33
    assert not any(c.action == REJECT and c.twice == APPROVE_AND_EDIT for c in choices)
    assert all(1.0 <= c.delay_s <= 2.0 for c in choices)


# --------------------------------------------------------------------------- the judge

DRAFT = "Hello,\n\nAbout your message: fine.\n\n(chaos writer, re <m1@x>, ref abc)"
EDIT = edited(DRAFT, "edit 1")


def record(state: ReplyState, text: str | None = DRAFT, key: str = "k1") -> ReplyRecord:
    return ReplyRecord(
        key=key,
        inbox_id="chaos-0@agentmail.to",
        message_id="<m1@x>",
        thread_key="t",
        state=state,
        created_at=datetime(2026, 12, 1, tzinfo=UTC),
        reply_text=text,
    )


def decision(status: str, action: str = APPROVE, text: str | None = DRAFT) -> Decision:
    return Decision("k1", "api", action, text, text == EDIT, status, 1.0)


def run(
    decisions: list[Decision], state: ReplyState, emails: list[str | None], text: str = DRAFT
) -> list[str]:
    figures = judge(
        decisions,
        {"k1": {DRAFT}},
        {"k1": "once"},
        {"k1": record(state, text)},
        {"k1": emails} if emails else {},
    )
    return figures.problems + [f"undecided {k}" for k in figures.undecided]


def test_an_approval_sent_once_with_its_text_passes() -> None:
    assert run([decision("applied"), decision("already")], ReplyState.SENT, [DRAFT]) == []


def test_an_edit_must_be_sent_as_edited() -> None:
    edit = decision("applied", text=EDIT)
    assert run([edit], ReplyState.SENT, [EDIT], text=EDIT) == []
    assert run([edit], ReplyState.SENT, [DRAFT], text=DRAFT)  # the draft went out instead


def test_the_text_answered_applied_wins_over_the_other_approved_one() -> None:
    both = [decision("refused"), decision("applied", text=EDIT)]
    assert run(both, ReplyState.SENT, [EDIT], text=EDIT) == []
    assert run(both, ReplyState.SENT, [DRAFT], text=DRAFT)


def test_an_email_not_as_the_ledger_records_or_twice_or_never_fails() -> None:
    assert run([decision("applied")], ReplyState.SENT, [DRAFT + "x"])
    assert run([decision("applied")], ReplyState.SENT, [DRAFT, DRAFT])
    assert run([decision("applied")], ReplyState.SENT, [])


def test_a_rejection_means_declined_and_no_email() -> None:
    reject = decision("applied", action=REJECT, text=None)
    assert run([reject], ReplyState.DECLINED, []) == []
    assert run([reject], ReplyState.DECLINED, [DRAFT])
    assert run([decision("applied")], ReplyState.DECLINED, [])  # declined, never rejected
    assert run([reject], ReplyState.SENT, [DRAFT])  # sent although the rejection applied


def test_a_draft_still_awaiting_at_the_end_is_undecided() -> None:
    assert run([decision("waiting")], ReplyState.AWAITING, []) == ["undecided k1"]


def test_a_superseded_draft_has_no_email_of_its_own() -> None:
    assert run([decision("refused")], ReplyState.COVERED, []) == []
    assert run([decision("refused")], ReplyState.COVERED, [DRAFT])
