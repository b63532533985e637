"""Dedupe decisions and expiry, without a broker."""

from __future__ import annotations

from onceonly.processors.dedupe.decisions import (
    Retention,
    Verdict,
    decide,
    expired,
    finished,
    stale,
)
from onceonly.schemas.ledger import EventEntry, EventState

HERE = (3, 41)
ELSEWHERE = (3, 57)
DAY_MS = 24 * 3600 * 1000


def test_a_new_event_is_processed_and_claimed_by_its_record() -> None:
    decision = decide(None, position=HERE, now_ms=1000)

    assert decision.verdict is Verdict.PROCESS
    assert decision.entry == EventEntry(EventState.IN_PROGRESS, 1000, HERE)


def test_a_succeeded_event_is_a_duplicate() -> None:
    entry = finished(True, position=HERE, now_ms=1000)

    assert decide(entry, position=ELSEWHERE, now_ms=2000).verdict is Verdict.DUPLICATE


def test_an_event_in_progress_under_another_record_is_skipped() -> None:
    entry = EventEntry(EventState.IN_PROGRESS, 1000, HERE)

    assert decide(entry, position=ELSEWHERE, now_ms=2000).verdict is Verdict.IN_PROGRESS


def test_the_owning_record_redelivered_after_a_crash_resumes() -> None:
    entry = EventEntry(EventState.IN_PROGRESS, 1000, HERE)

    assert decide(entry, position=HERE, now_ms=2000).verdict is Verdict.PROCESS


def test_a_failed_event_is_skipped_without_replay() -> None:
    entry = finished(False, position=HERE, now_ms=1000)

    assert decide(entry, position=ELSEWHERE, now_ms=2000).verdict is Verdict.FAILED


def test_a_failed_event_is_retried_by_an_explicit_replay() -> None:
    entry = finished(False, position=HERE, now_ms=1000)

    assert decide(entry, position=ELSEWHERE, now_ms=2000, replay=True).verdict is Verdict.PROCESS


def test_entries_older_than_the_retention_expire() -> None:
    now = 10 * DAY_MS
    entries = [
        ("old", EventEntry(EventState.SUCCEEDED, now - 8 * DAY_MS, HERE)),
        ("recent", EventEntry(EventState.SUCCEEDED, now - 6 * DAY_MS, HERE)),
    ]

    assert list(expired(entries, now_ms=now, retention=Retention(7 * DAY_MS))) == ["old"]


def test_a_provider_with_its_own_window_expires_on_it_and_the_others_on_the_default() -> None:
    now = 10 * DAY_MS
    three_days_old = now - 3 * DAY_MS
    entries = [
        (b"agentmail:evt-1", EventEntry(EventState.SUCCEEDED, three_days_old, HERE)),
        (b"stripe:evt_1", EventEntry(EventState.SUCCEEDED, three_days_old, HERE)),
        (b"github:d-1", EventEntry(EventState.SUCCEEDED, three_days_old, HERE)),
    ]
    retention = Retention(7 * DAY_MS, {"agentmail": 2 * DAY_MS, "stripe": 4 * DAY_MS})

    assert list(expired(entries, now_ms=now, retention=retention)) == [b"agentmail:evt-1"]


def test_an_entry_expires_at_its_last_change_plus_its_providers_window() -> None:
    retention = Retention(7 * DAY_MS, {"standard.crm": DAY_MS})

    assert retention.expires_at_ms("standard.crm:e-1", 500) == 500 + DAY_MS
    assert retention.expires_at_ms("nylas:e-1", 500) == 500 + 7 * DAY_MS
    assert retention.expires_at_ms("no-provider", 500) == 500 + 7 * DAY_MS
    assert retention.shortest_ms == DAY_MS


def test_an_entry_survives_its_json_round_trip() -> None:
    entry = EventEntry(EventState.FAILED, 123, (2, 9))

    assert EventEntry.from_json(entry.to_json()) == entry


def test_a_replayed_failed_event_is_claimed_in_progress_by_the_replaying_record() -> None:
    entry = finished(False, position=HERE, now_ms=1000)

    decision = decide(entry, position=ELSEWHERE, now_ms=2000, replay=True)

    assert decision.entry == EventEntry(EventState.IN_PROGRESS, 2000, ELSEWHERE)


def test_the_owning_record_redelivered_claims_the_event_again_at_the_new_time() -> None:
    entry = EventEntry(EventState.IN_PROGRESS, 1000, HERE)

    assert decide(entry, position=HERE, now_ms=2000).entry == EventEntry(
        EventState.IN_PROGRESS, 2000, HERE
    )


def test_a_finished_event_is_stored_with_its_outcome_time_and_owner() -> None:
    assert (finished(True, position=HERE, now_ms=5), finished(False, position=HERE, now_ms=6)) == (
        EventEntry(EventState.SUCCEEDED, 5, HERE),
        EventEntry(EventState.FAILED, 6, HERE),
    )


# -- a claim left by a record committed before (the simulator's finding F37) -------------


def test_a_claim_owned_by_a_record_committed_before_the_assignment_is_stale() -> None:
    # its work was acknowledged, its outcome lost: the event is processed again
    entry = EventEntry(EventState.IN_PROGRESS, 1000, HERE)

    decision = decide(entry, position=ELSEWHERE, now_ms=2000, replay=True, read_from=42)

    assert decision.verdict is Verdict.PROCESS
    assert decision.entry == EventEntry(EventState.IN_PROGRESS, 2000, ELSEWHERE)


def test_a_claim_owned_by_a_record_read_since_the_assignment_is_in_progress() -> None:
    entry = EventEntry(EventState.IN_PROGRESS, 1000, HERE)

    assert decide(entry, position=ELSEWHERE, now_ms=2000, read_from=41).verdict is (
        Verdict.IN_PROGRESS
    )


def test_a_claim_owned_by_a_record_of_another_partition_is_in_progress() -> None:
    entry = EventEntry(EventState.IN_PROGRESS, 1000, (2, 1))

    assert decide(entry, position=ELSEWHERE, now_ms=2000, read_from=42).verdict is (
        Verdict.IN_PROGRESS
    )


def test_a_claim_is_not_judged_stale_before_any_record_was_read() -> None:
    entry = EventEntry(EventState.IN_PROGRESS, 1000, HERE)

    assert decide(entry, position=ELSEWHERE, now_ms=2000, read_from=None).verdict is (
        Verdict.IN_PROGRESS
    )


def test_only_another_records_claim_in_progress_is_stale() -> None:
    # a failed event's replay, and a record resuming its own claim, are no lost outcome
    claimed = EventEntry(EventState.IN_PROGRESS, 1000, HERE)
    failed = finished(False, position=HERE, now_ms=1000)

    assert [
        stale(claimed, ELSEWHERE, 42),
        stale(claimed, HERE, 42),
        stale(failed, ELSEWHERE, 42),
    ] == [True, False, False]
