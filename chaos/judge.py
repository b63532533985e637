"""How a chaos run is judged: what the mail server, the ledger and the logs say at the end."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from typing import Any

from chaos.approvals import REJECT, ApprovalFigures
from chaos.approvals import judge as judge_approvals
from chaos.common import (
    DEAD_LETTER_TOPIC,
    LEDGER_TOPIC,
)
from chaos.decider import Decider
from chaos.figures import Figures, Span
from chaos.letters import LostFigures, naming_answered
from chaos.stack import Stack
from chaos.verdict import Verdict
from onceonly.foundation.kafka import Connection
from testkit.invariants import Decision as InvariantDecision
from testkit.invariants import Message, Observed, WriterCall, check, emails_from_outbox
from testkit.invariants import Verdict as InvariantVerdict


class Judge(Stack):
    """The verdict of a run, read once the run is over."""

    decider: Decider | None = None  #: the approval mode's decider (--approvals)

    async def verdict(self) -> Verdict:
        from onceonly.operations.catchup import read_ledger
        from onceonly.processors.writer.contract import reply_key

        assert self.plan is not None and self.load is not None
        outbox = (await self._mail("GET", "/_control/outbox"))["outbox"]
        stats = await self._stats()
        ledger = await asyncio.to_thread(read_ledger, Connection(self.bootstrap), LEDGER_TOPIC)
        found = await self._dead_letters()
        per = Counter((e["inbox_id"], e["replied_to_message_id"]) for e in outbox)
        expected = {(m.inbox_id, m.message_id): m for m in self.plan.messages}
        by_key = {reply_key(i, mid): (i, mid) for i, mid in expected}
        approvals, rejected = self._approvals(outbox, ledger, expected, by_key, reply_key)
        checked = await self._checked(expected, outbox, ledger)
        covered, missing = checked.with_outcome("covered"), sorted(checked.with_outcome("missing"))
        doubled = {p: c for p, c in per.items() if p in expected and c > 1}
        answered = {reply_key(*p): f"{p[1]} in {p[0]}" for p in expected if per[p] or p in covered}
        verdict = Verdict(
            opts=self.opts,
            messages=len(expected),
            deliveries=self.plan.deliveries,
            load=self.load.stats,
            out_of_order=len(self.plan.out_of_order),
            concurrent=len(self.plan.concurrent),
            late=len(self.plan.late_dups),
            emails=len(outbox),
            answered=sum(1 for p in expected if per[p] >= 1),
            covered=len(covered),
            rejected=len(rejected),
            approvals=approvals,
            missing=missing,
            doubled=doubled,
            unexpected={p: c for p, c in per.items() if p not in expected},
            kills=self.kills,
            crashes=self.crashes,
            broker_restarts=self.broker_restarts,
            figures=self._figures(outbox),
            injected=dict(self.injected),
            reply_calls=int(stats["requests"].get("reply", 0)),
            ledger_states=dict(Counter(r.state.value for r in ledger.values())),
            dead_letters=-1 if found is None else len(found),
            letters_naming_answered=naming_answered(
                [(d.offset, d.letter) for d in found or []], answered, reply_key
            ),
            writer=self.writer_log.figures(by_key),
            pauses=self.pause_records,
            lost=self._lost(outbox, answered, reply_key),
            worker_logs=dict(self._worker_log_counts()),
            snapshots=self.snapshots,
            phases=self.phases,
            replayed=self.replayed,
            catch_ups=self.catch_ups,
            duration_s=self.elapsed(),
            started=self.started_wall,
            run_dir=self.run_dir,
        )
        verdict.violations = [str(v) for v in checked.violations]
        verdict.findings = self.findings(verdict, ledger, reply_key, outbox)
        verdict.timeline = self._timeline()
        return verdict

    async def _checked(
        self, expected: dict[tuple[str, str], Any], outbox: list[dict[str, Any]], ledger: Any
    ) -> InvariantVerdict:
        await asyncio.to_thread(self.writer_log.refresh)
        return check(self._observed(expected, outbox, ledger))

    def _observed(
        self, expected: dict[tuple[str, str], Any], outbox: list[dict[str, Any]], ledger: Any
    ) -> Observed:
        """The run as testkit.invariants judges every run: the plan's messages, the mail
        server's emails, the ledger, the writer calls, the decider's drafts and decisions."""
        d = self.decider
        return Observed(
            messages=tuple(Message(*pair) for pair in expected),
            emails=emails_from_outbox(outbox),
            ledger=ledger,
            writer_calls=tuple(
                WriterCall(frozenset(c.keys), c.text) for c in self.writer_log.snapshot()
            ),
            drafts=frozenset(d.listed) if d else frozenset(),
            decisions=tuple(
                InvariantDecision(
                    x.key,
                    "reject" if x.action == REJECT else "edit" if x.edit else "approve",
                    x.text,
                    applied=x.status == "applied",
                )
                for x in (d.decisions if d else ())
            ),
            settled=True,
        )

    def _approvals(
        self,
        outbox: list[dict[str, Any]],
        ledger: dict[str, Any],
        expected: dict[tuple[str, str], Any],
        by_key: dict[str, tuple[str, str]],
        key_of: Any,
    ) -> tuple[ApprovalFigures | None, set[tuple[str, str]]]:
        """The approval mode's figures, and the messages whose draft was rejected (answered
        by a decline: no email expected)."""
        if self.decider is None:
            return None, set()
        emails: dict[str, list[str | None]] = defaultdict(list)
        for e in outbox:
            emails[key_of(e["inbox_id"], e["replied_to_message_id"])].append(e.get("text"))
        d = self.decider
        figures = judge_approvals(d.decisions, d.listed, d.twice, ledger, emails)
        figures.redecided = d.redecided
        declined = {k for k, r in ledger.items() if k in by_key and r.state.value == "declined"}
        rejecting = {x.key for x in d.decisions if x.action == "reject"}
        figures.problems += [f"{k}: declined, never rejected" for k in sorted(declined - rejecting)]
        rejected = {by_key[k] for k in declined if not emails.get(k)}
        return figures, rejected

    async def _dead_letters(self) -> list[Any] | None:
        """The dead letters, or None when the topic cannot be read."""
        from onceonly.operations.replay import ReplayError, dead_letters

        try:
            connection = Connection(self.bootstrap)
            return await asyncio.to_thread(dead_letters, connection, DEAD_LETTER_TOPIC)
        except ReplayError:
            return None

    def _lost(
        self, outbox: list[dict[str, Any]], answered: dict[str, str], reply_key: Any
    ) -> LostFigures:
        """The lost webhooks: how many, answered, and answered after the catch-up began."""
        assert self.plan is not None
        lost = [(m.inbox_id, m.message_id) for m in self.plan.messages if m.n in self.plan.lost]
        late = {
            (e["inbox_id"], e["replied_to_message_id"])
            for e in outbox
            if float(e["sent_at"]) >= self.catch_up_wall > 0
        }
        return LostFigures(
            lost=len(lost),
            answered=sum(1 for p in lost if reply_key(*p) in answered),
            after_catch_up=sum(1 for p in lost if p in late),
        )

    def _timeline(self) -> list[str]:
        return [
            line
            for line in self.events_log.read_text(encoding="utf-8").splitlines()
            if line.startswith("[") and "] lag" not in line and "] status:" not in line
        ]

    def _figures(self, outbox: list[dict[str, Any]]) -> Figures:
        """The longest 503 window and refused delivery, the longest gap between emails."""
        assert self.load is not None
        started = self.started_wall.timestamp()
        return Figures.measure(
            self.load.stats.answers,
            [float(e["sent_at"]) - started for e in outbox],
            Span(*self.load_span),
        )

    def _worker_log_counts(self) -> Counter[str]:
        logs = Counter[str]()
        for worker in self.workers:
            text = worker.log()
            for label, needle in (
                ("reply sent", "reply sent"),
                ("duplicate deliveries skipped", "delivery skipped"),
                ("replies skipped (already handled)", "reply skipped: already handled"),
                ("send retries (same key)", "send retry with the same key"),
                ("replies dead-lettered", "reply dead-lettered"),
                ("worker exits on a failure of its own", "worker failure; exiting"),
                ("writer retries", "writer retry"),
                ("rewrites for newer messages", "reply superseded by newer messages"),
                ("replies found in the thread", "reply found in the thread"),
                ("jobs dropped (rebalance)", "job dropped; its records will be read again"),
            ):
                logs[label] += text.count(needle)
        return logs

    def findings(
        self,
        verdict: Verdict,
        ledger: dict[str, Any],
        key_of: Any,
        outbox: list[dict[str, Any]] | None = None,
    ) -> list[str]:
        """For each missing or doubled email: its ledger record, the log lines naming it, its
        writer calls and emails (which call wrote each text), the pauses it was in flight at."""
        out: list[str] = []
        suspects = [(p, "missing") for p in verdict.missing[:20]] + [
            (p, f"{c} emails") for p, c in list(verdict.doubled.items())[:20]
        ]
        logs = {w.name: w.log().splitlines() for w in self.workers}
        logs["ingest"] = self.ingest.log().splitlines() if self.ingest else []
        for (inbox, message_id), what in suspects:
            key = key_of(inbox, message_id)
            record = ledger.get(key)
            out.append(f"## {message_id} in {inbox}: {what}; reply key {key}")
            out.append(f"ledger: {record!r}")
            for name, lines in logs.items():
                hits = [ln for ln in lines if key in ln or message_id in ln]
                for line in hits[:15]:
                    out.append(f"{name}: {line}")
            out += self._writer_findings(key, message_id, inbox, outbox or [])
            out.append("")
        return out

    def _writer_findings(
        self, key: str, message_id: str, inbox: str, outbox: list[dict[str, Any]]
    ) -> list[str]:
        out = []
        calls = self.writer_log.for_key(key)
        for call in calls:
            took = "never ended" if call.ended is None else f"{call.ended - call.started:.1f} s"
            text = (call.text or "(no text)").replace("\n", " ")[-60:]
            out.append(
                f"writer call {call.call} by {call.worker} (pid {call.pid}), attempt "
                f"{call.attempt}, {len(call.keys)} messages, {took}: ...{text}"
            )
        by_text = self.writer_log.by_text()
        started = self.started_wall.timestamp()
        for email in outbox:
            if (email["inbox_id"], email["replied_to_message_id"]) == (inbox, message_id):
                wrote = by_text.get(email.get("text") or "")
                out.append(
                    f"email at {float(email['sent_at']) - started:.1f}s, key "
                    f"{email.get('idempotency_key')}, text of writer call "
                    f"{wrote.call if wrote else '?'}"
                )
        out += [
            f"in flight at the pause: {r.describe()}" for r in self.pause_records if key in r.keys
        ]
        return out
