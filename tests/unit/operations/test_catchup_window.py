"""Where catch-up starts when it is not told: never past the mail an outage lost."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from onceonly.operations.catchup import (
    LOOK_BACK,
    Answered,
    Window,
    look_back_for,
    window_for,
    window_line,
)
from onceonly.schemas.ledger import ReplyRecord, ReplyState

INBOX = "support@agentmail.to"
WEEK = LOOK_BACK["agentmail"]
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def _ledger(*ages: timedelta, inbox: str = INBOX) -> dict[str, ReplyRecord]:
    """One answered message per age (its own time that long before NOW)."""
    return {
        f"k{n}": ReplyRecord(
            f"k{n}",
            inbox,
            f"<m{n}@x>",
            "agentmail:t",
            ReplyState.SENT,
            NOW - age + timedelta(minutes=1),
            message_at=NOW - age,
        )
        for n, age in enumerate(ages)
    }


def test_mail_answered_after_the_outage_does_not_move_the_start_past_it() -> None:
    # lost 30 h and 29 h ago; one message answered 6 minutes ago, after the webhook was back
    window = window_for(Answered.of(_ledger(timedelta(minutes=6)).values()), INBOX, NOW)

    assert window is not None and window.start == NOW - WEEK
    assert window.start < NOW - timedelta(hours=30)
    assert "no earlier message" in window.why


def test_an_outage_longer_than_the_look_back_is_listed_from_before_it_began() -> None:
    # answered 10 days ago, then nothing until an answer an hour ago
    ledger = _ledger(timedelta(days=10), timedelta(hours=1))

    window = window_for(Answered.of(ledger.values()), INBOX, NOW)

    assert window is not None and window.start == NOW - timedelta(days=10)
    assert "an outage that ended since is listed whole" in window.why


def test_a_busy_inbox_starts_at_its_last_message_before_the_look_back() -> None:
    ledger = _ledger(*(timedelta(days=d, hours=3) for d in range(12)))

    window = window_for(Answered.of(ledger.values()), INBOX, NOW)

    assert window is not None and window.start == NOW - timedelta(days=7, hours=3)


def test_only_the_accounts_own_records_count() -> None:
    ledger = {
        **_ledger(timedelta(hours=1)),
        **{f"o{k}": r for k, r in _ledger(timedelta(days=30), inbox="other@x").items()},
    }

    window = window_for(Answered.of(ledger.values()), INBOX, NOW)

    assert window is not None and window.start == NOW - WEEK
    assert (
        window_for(Answered.of(_ledger(timedelta(days=3), inbox="other@x").values()), INBOX, NOW)
        is None
    )


def test_since_wins_and_a_time_without_a_zone_is_utc() -> None:
    window = window_for(Answered(), INBOX, NOW, since=datetime(2026, 11, 20))

    assert window == Window(datetime(2026, 11, 20, tzinfo=UTC), "--since")


def test_the_summary_says_which_window_was_listed() -> None:
    line = window_line(INBOX, Window(NOW - WEEK, "--since"), NOW)

    assert (
        line
        == f"listed {INBOX} from 2026-11-25T12:00:00+00:00 to 2026-12-02T12:00:00+00:00 (--since)"
    )


def test_the_look_back_is_the_providers_horizon_unless_set() -> None:
    """AgentMail (Svix): disabled after 5 days of failures; Nylas: failed after 72 h; each
    with two days to notice. A setting or --look-back wins for either."""
    assert look_back_for("agentmail", None) == timedelta(days=7)
    assert look_back_for("nylas", None) == timedelta(days=5)
    assert look_back_for("nylas", timedelta(hours=36)) == timedelta(hours=36)


def test_a_shorter_look_back_starts_later() -> None:
    ledger = Answered.of(_ledger(timedelta(days=4)).values())

    window = window_for(ledger, INBOX, NOW, look_back=timedelta(days=2))

    assert window is not None and window.start == NOW - timedelta(days=4)
    assert "2 days back" in window.why


def test_the_setting_and_the_option_take_iso_durations_above_zero() -> None:
    import click
    import pytest
    from pydantic import ValidationError

    from onceonly.cli import _duration
    from onceonly.foundation.settings import Settings

    assert Settings(catchup_lookback="P3D").catchup_lookback == timedelta(days=3)
    assert Settings().catchup_lookback is None
    with pytest.raises(ValidationError):
        Settings(catchup_lookback="-PT1H")
    assert _duration("PT36H") == timedelta(hours=36) and _duration(None) is None
    for bad in ("0", "soon"):
        with pytest.raises(click.BadParameter):
            _duration(bad)
