"""The takeover phase's figures from the new owner's log lines, and their verdicts."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from bench._proc_report import Results, figures
from bench._proc_takeover import Takeover, read_marks

KILL = datetime.fromisoformat("2026-12-01T12:00:00.000000Z").timestamp()
LOG = """\
2026-12-01T11:59:58.000000Z [info     ] joined the consumer group      group=g partitions={}
2026-12-01T12:00:01.000000Z [info     ] worker starting                app=g
2026-12-01T12:00:05.000000Z [info     ] joined the consumer group      group=g partitions={}
2026-12-01T12:00:06.000000Z [info ] tables recovered active_partitions=3 changelog_records=10
2026-12-01T12:00:11.000000Z [info     ] joined the consumer group      group=g partitions={}
2026-12-01T12:00:21.000000Z [info ] tables recovered active_partitions=24 changelog_records=40000
2026-12-01T12:00:22.500000Z [info     ] worker ready                   app=g
"""


def test_the_replay_is_timed_from_the_last_join_to_the_last_recovery(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    log.write_text(LOG, encoding="utf-8")
    t = Takeover("cold", 20_000, 8, 23.0, 23.5)

    read_marks(t, log, KILL)

    assert (t.joined_s, t.recovered_s, t.ready_s) == (11.0, 21.0, 22.5)
    assert t.changelog_records == 40_000
    assert t.replay_per_s == 4_000


def test_a_takeover_past_its_target_is_reported_not_met() -> None:
    r = Results(events=100, partitions=8)
    r.takeovers = [Takeover("cold", 10, 8, 31.0, 59.0), Takeover("standby", 10, 4, 9.0, 16.0)]

    verdicts = {row[0]: row[3] for row in figures(r) if row[3]}

    assert verdicts == {
        "(6) cold takeover, 10 entries: first answered": "NOT met",
        "(6) cold takeover, 10 entries: every partition answered": "met",
        "(6) standby takeover, 10 entries: first answered": "met",
        "(6) standby takeover, 10 entries: every partition answered": "NOT met",
    }
