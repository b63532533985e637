"""How a chaos run is judged: what the mail server, the ledger and the logs say at the end."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from chaos.common import (
    DEAD_LETTER_TOPIC,
    LEDGER_TOPIC,
)
from chaos.figures import Figures, Span
from chaos.stack import Stack
from chaos.verdict import Verdict


class Judge(Stack):
    """The verdict of a run, read once the run is over."""

    async def verdict(self) -> Verdict:
        from operations.catchup import read_ledger
        from operations.replay import ReplayError, dead_letters
        from processors.messages import reply_key

        assert self.plan is not None and self.load is not None
        outbox = (await self._mail("GET", "/_control/outbox"))["outbox"]
        stats = await self._stats()
        ledger = await asyncio.to_thread(read_ledger, self.bootstrap, LEDGER_TOPIC)
        try:
            letters = len(await asyncio.to_thread(dead_letters, self.bootstrap, DEAD_LETTER_TOPIC))
        except ReplayError:
            letters = -1
        per = Counter((e["inbox_id"], e["replied_to_message_id"]) for e in outbox)
        expected = {(m.inbox_id, m.message_id): m for m in self.plan.messages}
        by_key = {reply_key(i, mid): (i, mid) for i, mid in expected}
        covered = _covered(expected, per, ledger, by_key, reply_key)
        missing = sorted(p for p in expected if per[p] == 0 and p not in covered)
        doubled = {p: c for p, c in per.items() if p in expected and c > 1}
        unexpected = {p: c for p, c in per.items() if p not in expected}
        states = Counter(r.state.value for r in ledger.values())
        logs = self._worker_log_counts()
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
            missing=missing,
            doubled=doubled,
            unexpected=unexpected,
            kills=self.kills,
            crashes=self.crashes,
            broker_restarts=self.broker_restarts,
            figures=self._figures(outbox),
            injected=dict(self.injected),
            reply_calls=int(stats["requests"].get("reply", 0)),
            ledger_states=dict(states),
            dead_letters=letters,
            worker_logs=dict(logs),
            snapshots=self.snapshots,
            phases=self.phases,
            replayed=self.replayed,
            catch_ups=self.catch_ups,
            duration_s=self.elapsed(),
            started=self.started_wall,
            run_dir=self.run_dir,
        )
        verdict.findings = self.findings(verdict, ledger, reply_key)
        verdict.timeline = [
            line
            for line in self.events_log.read_text(encoding="utf-8").splitlines()
            if line.startswith("[") and "] lag" not in line and "] status:" not in line
        ]
        return verdict

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
            text = worker.log_text()
            for label, needle in (
                ("reply sent", "reply sent"),
                ("duplicate deliveries skipped", "delivery skipped"),
                ("replies skipped (already handled)", "reply skipped: already handled"),
                ("send retries (same key)", "send retry with the same key"),
                ("replies dead-lettered", "reply dead-lettered"),
                ("worker exits on a failure of its own", "worker failure; exiting"),
            ):
                logs[label] += text.count(needle)
        return logs

    def findings(self, verdict: Verdict, ledger: dict[str, Any], key_of: Any) -> list[str]:
        """For each missing or doubled email: its ledger record and the log lines naming it."""
        out: list[str] = []
        suspects = [(p, "missing") for p in verdict.missing[:20]] + [
            (p, f"{c} emails") for p, c in list(verdict.doubled.items())[:20]
        ]
        logs = {w.name: w.log_text().splitlines() for w in self.workers}
        logs["ingest"] = self.ingest.log_text().splitlines() if self.ingest else []
        for (inbox, message_id), what in suspects:
            key = key_of(inbox, message_id)
            record = ledger.get(key)
            out.append(f"## {message_id} in {inbox}: {what}; reply key {key}")
            out.append(f"ledger: {record!r}")
            for name, lines in logs.items():
                hits = [ln for ln in lines if key in ln or message_id in ln]
                for line in hits[:15]:
                    out.append(f"{name}: {line}")
            out.append("")
        return out


# --------------------------------------------------------------------------- CLI


def _covered(
    expected: Any, per: Counter[Any], ledger: dict[str, Any], by_key: dict[str, Any], key_of: Any
) -> set[tuple[str, str]]:
    """Messages with no email of their own whose ledger says a burst's one email covered them."""
    covered: set[tuple[str, str]] = set()
    for pair in expected:
        record = ledger.get(key_of(*pair))
        if per[pair] == 0 and record is not None and record.state.value == "covered":
            coverer = by_key.get(record.covered_by or "")
            if coverer is not None and per[coverer] == 1:
                covered.add(pair)
    return covered
