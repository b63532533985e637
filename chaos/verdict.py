"""The verdict of a chaos run and its report."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from chaos.approvals import ApprovalFigures
from chaos.figures import Figures
from chaos.letters import LostFigures
from chaos.load import LoadStats
from chaos.options import WRITER_SLOW, Options, span
from chaos.pauses import PauseRecord, pause_rows
from chaos.stack import Snapshot
from chaos.writer_log import WriterFigures

# --------------------------------------------------------------------------- report


@dataclass
class Verdict:
    opts: Options
    messages: int
    deliveries: int
    load: LoadStats
    out_of_order: int
    concurrent: int
    late: int
    emails: int
    answered: int
    covered: int
    missing: list[tuple[str, str]]
    doubled: dict[tuple[str, str], int]
    unexpected: dict[tuple[str, str], int]
    kills: list[str]
    crashes: list[str]
    broker_restarts: list[str]
    figures: Figures
    injected: dict[str, int]
    reply_calls: int
    ledger_states: dict[str, int]
    dead_letters: int
    worker_logs: dict[str, int]
    snapshots: list[Snapshot]
    phases: list[tuple[str, float]]
    replayed: str
    catch_ups: list[list[int]]
    duration_s: float
    started: datetime
    run_dir: Path
    #: dead letters that name a message answered all the same (target 0)
    letters_naming_answered: list[str] = field(default_factory=list)
    writer: WriterFigures = field(default_factory=lambda: WriterFigures(0, 0))
    pauses: list[PauseRecord] = field(default_factory=list)
    lost: LostFigures = field(default_factory=lambda: LostFigures(0, 0, 0))
    findings: list[str] = field(default_factory=list)
    #: messages whose draft was rejected: answered by a decline, no email (--approvals)
    rejected: int = 0
    approvals: ApprovalFigures | None = None
    timeline: list[str] = field(default_factory=list)
    #: what testkit.invariants.check found broken (the one checker of "once")
    violations: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return (
            not self.violations
            and not self.missing
            and not self.doubled
            and not self.unexpected
            and self.emails == self.messages - self.covered - self.rejected
            and (self.approvals is None or self.approvals.ok)
            and not self.load.never_accepted
            and self.settled
            and self.dead_letters >= 0
            and not self.letters_naming_answered
        )

    @property
    def settled(self) -> bool:
        """The workers went idle after the last phase (nothing was still moving)."""
        return bool(self.snapshots) and self.snapshots[-1].quiet

    def _load_rows(self) -> list[tuple[str, str]]:
        o = self.opts
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(self.load.statuses.items()))
        return [
            ("result", "PASS" if self.passed else "FAIL"),
            ("messages", f"{self.messages:,}"),
            (
                "deliveries sent (incl. duplicates)",
                f"{self.deliveries:,} ({self.concurrent:,} concurrent and {self.late:,} late "
                f"duplicates, {o.late_duplicate_delay_s:g}-{1.5 * o.late_duplicate_delay_s:g} s "
                f"later); {self.load.accepted:,} accepted",
            ),
            ("out of order", f"{self.out_of_order:,} messages arrived after a later one"),
            (
                "POSTs to ingest",
                f"{self.load.attempts:,} ({statuses}); {self.load.retried:,} "
                "deliveries needed a retry",
            ),
            ("deliveries never accepted", f"{len(self.load.never_accepted):,}"),
        ]

    def _fault_rows(self) -> list[tuple[str, str]]:
        o = self.opts
        writer = (
            f"chaos.writers:slow, {span(o.writer_s)} s, {o.writer_long_share:.0%} of calls "
            f"{span(o.writer_long_s)} s, a new text each call; {o.writer_concurrency} calls "
            "in flight per worker at most"
            if o.writer == WRITER_SLOW
            else "onceonly.processors.writer:acknowledge (instant)"
        )
        return [
            (
                "mail API idempotency keys",
                "IGNORED: every reply call sends, so doubles are onceonly's own"
                if o.keys_ignored
                else "honoured (a resend with the same key is replayed, not sent)",
            ),
            ("reply writer", writer),
            ("worker kills (SIGKILL)", f"{len(self.kills)}: {', '.join(self.kills) or '-'}"),
            ("worker exits on their own", f"{len(self.crashes)}: {', '.join(self.crashes) or '-'}"),
            (
                "broker restarts" if o.nodes == 1 else f"broker faults ({o.nodes} nodes)",
                f"{len(self.broker_restarts)}: {', '.join(self.broker_restarts) or '-'}",
            ),
            (
                "AgentMail faults",
                f"{self.injected.get('5xx', 0):,} 5xx without sending, "
                f"{self.injected.get('lost', 0):,} responses lost after sending, "
                f"{self.injected.get('spikes', 0)} latency spikes over the send timeout, "
                f"latency 0-{o.latency_ms:g} ms; {self.reply_calls:,} reply calls",
            ),
            *pause_rows(self.pauses, o.pauses),
            *self.lost.rows(),
            *(self.approvals.rows(self.rejected) if self.approvals else []),
        ]

    def lines(self) -> list[str]:
        o = self.opts
        rows = [
            ("result", "PASS" if self.passed else "FAIL"),
            *self._load_rows()[1:],
            ("settled at the end", "yes" if self.settled else "NO: lag or sends still moving"),
            ("emails", f"{self.emails:,}"),
            ("distinct answered", f"{self.answered:,}"),
            ("covered by a burst reply", f"{self.covered:,}"),
            ("missing", f"{len(self.missing):,}"),
            ("doubled", f"{len(self.doubled):,} messages with more than one email"),
            ("emails to unknown messages", f"{len(self.unexpected):,}"),
            *self._fault_rows(),
            *self.figures.rows(),
            (
                "emails after each phase",
                "; ".join(
                    f"{s.phase}: {s.emails:,}{'' if s.quiet else ' (NOT quiet)'}"
                    for s in self.snapshots
                ),
            ),
            (
                "replay",
                f"{int(self.replayed):,} records replayed"
                if self.replayed.isdigit()
                else self.replayed or "-",
            ),
            ("catch-up", self.catch_up_line()),
            (
                "ledger records",
                ", ".join(f"{k} {v:,}" for k, v in sorted(self.ledger_states.items())),
            ),
            (
                "dead letters",
                (f"{self.dead_letters:,}" if self.dead_letters >= 0 else "NOT readable")
                + f"; naming answered messages: {len(self.letters_naming_answered):,} (target 0)",
            ),
            *self.writer.rows(),
            ("worker log counts", ", ".join(f"{k} {v:,}" for k, v in self.worker_logs.items())),
            ("phases", ", ".join(f"{name} {s:.0f} s" for name, s in self.phases)),
            ("duration", f"{self.duration_s:.0f} s ({self.duration_s / 60:.1f} min)"),
        ]
        width = max(len(k) for k, _ in rows)
        out = [f"chaos run, {o.size}: {o.command()}"]
        out += [f"  {k.ljust(width)}  {v}" for k, v in rows]
        for label, items in (
            ("invariants broken (testkit.invariants)", self.violations),
            ("missing", [f"{m} in {i}" for i, m in self.missing]),
            ("doubled", [f"{m} in {i}: {c} emails" for (i, m), c in self.doubled.items()]),
            ("unknown", [f"{m} in {i}: {c} emails" for (i, m), c in self.unexpected.items()]),
            ("never accepted", self.load.never_accepted),
            ("dead letters naming answered messages", self.letters_naming_answered),
            ("approvals broken", self.approvals.problems if self.approvals else []),
            ("drafts undecided", self.approvals.undecided if self.approvals else []),
        ):
            if items:
                out.append(
                    f"  {label}: " + ", ".join(items[:20]) + (" ..." if len(items) > 20 else "")
                )
        return out

    def catch_up_line(self) -> str:
        if not self.catch_ups:
            return "-"
        found, answered, skipped, by_agent, already, pending = (
            sum(column) for column in zip(*self.catch_ups, strict=True)
        )
        return (
            f"{len(self.catch_ups)} inboxes: found {found:,}, answered {answered:,}, skipped "
            f"{skipped:,} ({by_agent:,} sent by the agent, {already:,} already answered), "
            f"pending {pending:,}"
        )

    def markdown(self) -> str:
        load = os.getloadavg()
        body = [
            f"# Chaos run, {self.started:%Y-%m-%d}, {self.opts.size}",
            "",
            "```",
            *self.lines(),
            "```",
            "",
            f"- command: `{self.opts.command()}` (from the repository root)",
            f"- started {self.started.isoformat(timespec='seconds')}; machine: "
            f"{os.cpu_count()} cores, {platform.platform()}, Python "
            f"{platform.python_version()}; load average at the end "
            f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
            "- what runs and how the verdict is made: the docstring of `chaos/run.py`",
        ]
        if self.timeline:
            body += ["", "## Timeline (s since the start)", "", "```", *self.timeline, "```"]
        return "\n".join(body) + "\n"
