"""What "once" means, checked in one place: the simulator, the chaos suite, the integration
tests and the benchmarks' verdicts all judge a run with :func:`check`.

A run is judged from what the world shows at its end (:class:`Observed`): the inbound
messages and whether their deliveries were genuine, the emails the mail API holds, the reply
ledger's final records, what each writer call saw and wrote, the skips and the open dead
letters, and the decisions a person took on drafts. Every verified message must have exactly
one outcome:

- **answered**: one email of its own;
- **covered**: no email of its own, its ledger record ``covered`` by a reply (the end of the
  chain of ``covered_by``) that has its email, and the writer call that wrote that email's
  text saw this message;
- **declined**: the ledger says ``declined``, with a reason;
- **skipped** or **dead-lettered**: a recorded skip or an open dead letter naming it, with a
  reason or check.

Besides: never two emails for one message; no email for a message whose delivery was not
verified (or that never arrived), nor a writer call that saw one; a draft sent only once a
person approved it (or edited it: then with the edited text), never after a rejection, nor
after a newer reply that covers its message superseded it; once a run has settled, the ledger
agrees with the mail API (``sent`` exactly where an email exists); and, where the run set the
group's ``ONCEONLY_MODEL_RPM``, no 60 s in which the group's writer calls started more often
than it (:func:`most_in_window`). Pure: no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from onceonly.processors.writer.contract import reply_key
from onceonly.schemas.ledger import ReplyRecord, ReplyState

Pair = tuple[str, str]  #: (inbox_id, message_id)


@dataclass(frozen=True, slots=True)
class Message:
    """An inbound message the run offered; ``verified`` False for a forged delivery."""

    inbox_id: str
    message_id: str
    verified: bool = True

    @property
    def pair(self) -> Pair:
        return (self.inbox_id, self.message_id)


@dataclass(frozen=True, slots=True)
class Email:
    """One email the mail API holds, as its reply to ``replied_to``."""

    inbox_id: str
    replied_to: str
    text: str | None = None

    @property
    def pair(self) -> Pair:
        return (self.inbox_id, self.replied_to)


@dataclass(frozen=True, slots=True)
class WriterCall:
    """One call of the reply writer: the reply keys of the messages it saw, what it wrote."""

    keys: frozenset[str]
    text: str | None


@dataclass(frozen=True, slots=True)
class Decision:
    """A person's decision on a draft: ``approve`` or ``edit`` (``text``: the text approved,
    as listed or as edited) or ``reject``; ``applied``: what the API answered it was (None:
    not known)."""

    key: str
    action: str
    text: str | None = None
    applied: bool | None = None


@dataclass(frozen=True, slots=True)
class Observed:
    """Everything a run's verdict is drawn from."""

    messages: tuple[Message, ...]
    emails: tuple[Email, ...]
    ledger: Mapping[str, ReplyRecord]
    #: None: the run kept no record of its writer calls (the ledger's ``covers`` is used)
    writer_calls: tuple[WriterCall, ...] | None = None
    #: messages recorded as skipped, with the reason
    skipped: Mapping[Pair, str] = field(default_factory=dict)
    #: messages with an open dead letter, with its check
    dead_lettered: Mapping[Pair, str] = field(default_factory=dict)
    #: messages with an open dead letter whose retry runs their event again (it did not
    #: end succeeded), whatever the letter's check
    rerun: frozenset[Pair] = frozenset()
    #: reply keys whose writer returned a draft, and the decisions taken on drafts
    drafts: frozenset[str] = frozenset()
    decisions: tuple[Decision, ...] = ()
    #: the run is over and every message had time to be answered: missing ones count
    settled: bool = True
    #: when each writer call of the whole group started (seconds; every call: failed,
    #: throttled and retried ones too), and the group's requests per minute (None: no limit)
    writer_starts: Sequence[float] = ()
    rpm: float | None = None


@dataclass(frozen=True, slots=True)
class Violation:
    invariant: str
    subject: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.subject}: {self.detail}"


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of every verified message, and every broken invariant."""

    outcomes: Mapping[Pair, str]
    violations: tuple[Violation, ...]

    @property
    def passed(self) -> bool:
        return not self.violations

    def count(self, outcome: str) -> int:
        return sum(1 for found in self.outcomes.values() if found == outcome)

    def with_outcome(self, outcome: str) -> set[Pair]:
        return {pair for pair, found in self.outcomes.items() if found == outcome}

    def of(self, invariant: str) -> list[Violation]:
        return [v for v in self.violations if v.invariant == invariant]


def last_coverer(ledger: Mapping[str, ReplyRecord], key: str) -> str:
    """The end of a chain of ``covered_by``: a draft covering older messages, itself covered
    by a newer message's reply, and so on (a cycle ends where it closes)."""
    seen = {key}
    while (record := ledger.get(key)) is not None and record.state is ReplyState.COVERED:
        key = record.covered_by or ""
        if key in seen:
            break
        seen.add(key)
    return key


def _saw(observed: Observed, coverer: ReplyRecord, key: str, text: str | None) -> bool:
    """Whether the writer call that wrote ``text`` (the coverer's email) saw ``key``."""
    if observed.writer_calls is None:
        return coverer.covers is not None and key in coverer.covers
    return any(key in call.keys and call.text == text for call in observed.writer_calls)


def _written(record: ReplyRecord, sent: str | None) -> str | None:
    """The text the writer wrote for an email's text ``sent``: the draft's, when a person
    edited it before approving."""
    approval = record.approval
    return approval.draft_text if approval and approval.draft_text is not None else sent


def _resent(record: ReplyRecord | None) -> bool:
    """Whether a retry of a letter naming ``record``'s message sends the record's text with
    its key: a send's failure (a replay reconciles it), not a writer's (no text)."""
    return record is not None and record.state is ReplyState.FAILED and bool(record.reply_text)


#: the check of a burst's letter: its retry runs the burst again (``Check.RECORD_FAILED``)
BURST_FAILED = "record_failed"
#: the checks of a letter whose retry runs its message's event again (it failed), and so
#: sends its reply's recorded text (``Check.SEND_FAILED``, ``Check.FETCH_FAILED``); a
#: ``retry_raced`` letter's event ran, and its retry runs nothing again
SENDS_AGAIN = frozenset({"send_failed", "fetch_failed"})


class _Judge:
    def __init__(self, observed: Observed) -> None:
        self.o = observed
        self.violations: list[Violation] = []
        self.per = Counter(email.pair for email in observed.emails)
        self.texts = {email.pair: email.text for email in observed.emails}
        self.by_key = {reply_key(*m.pair): m.pair for m in observed.messages}
        self.rejected = {d.key for d in observed.decisions if d.action == "reject"}

    def fail(self, invariant: str, pair: Pair | str, detail: str) -> None:
        subject = pair if isinstance(pair, str) else f"{pair[1]} in {pair[0]}"
        self.violations.append(Violation(invariant, subject, detail))

    def outcome(self, message: Message) -> str:
        pair, key = message.pair, reply_key(*message.pair)
        record = self.o.ledger.get(key)
        if self.per[pair] >= 1:
            return "answered"
        if record is not None and record.state is ReplyState.COVERED:
            return self._covered(pair, key, record)
        if record is not None and record.state is ReplyState.DECLINED:
            if not record.reason:
                self.fail("answered_once", pair, "declined without a reason")
            return "declined"
        if pair in self.o.skipped:
            return "skipped"
        if pair in self.o.dead_lettered:
            return "dead-lettered"
        if self.o.settled:
            state = record.state.value if record else "no ledger record"
            self.fail("answered_once", pair, f"no email, no cover, no skip ({state})")
        return "missing"

    def _covered(self, pair: Pair, key: str, record: ReplyRecord) -> str:
        end = last_coverer(self.o.ledger, record.covered_by or "")
        coverer, coverer_pair = self.o.ledger.get(end), self.by_key.get(end)
        # in an open letter: with the covering reply; or held by the open letter of a burst
        # of that reply's message, whose retry runs the burst again and recalls it (F43), or
        # sends the reply's recorded text with its key, which answers it (F50)
        letter = self.o.dead_lettered.get(coverer_pair) if coverer_pair else None
        held = pair in self.o.dead_lettered or letter == BURST_FAILED
        held = held or (letter in SENDS_AGAIN and _resent(coverer))
        # or any open letter whose retry runs that message's event again: its burst, or
        # its failed send (a retry_raced letter whose raced delivery left the event failed)
        reruns = coverer_pair is not None and coverer_pair in self.o.rerun
        held = held or (reruns and (coverer is None or _resent(coverer)))
        if coverer is None or coverer_pair is None:
            if held:  # the reply that superseded it never recorded
                return "dead-lettered"
            self.fail("answered_once", pair, f"covered by {end}, which no message of the run has")
            return "missing"
        if self.per[coverer_pair] == 0:
            if end in self.rejected:
                return "covered"  # the covering draft was rejected: no email is owed
            if held:
                return "dead-lettered"  # the covering reply's send failed, or its burst
            if self.o.settled:
                self.fail("answered_once", pair, f"covered by {end}, which has no email")
            return "missing"
        if not _saw(self.o, coverer, key, _written(coverer, self.texts.get(coverer_pair))):
            self.fail("covered_unseen", pair, f"covered by {end}, whose writer never saw it")
        return "covered"

    def emails(self) -> None:
        verified = {m.pair for m in self.o.messages if m.verified}
        for pair, count in self.per.items():
            if count > 1:
                self.fail("never_doubled", pair, f"{count} emails")
            if pair not in verified:
                self.fail("nothing_unverified", pair, "an email for no verified delivery")
        seen = {key for call in self.o.writer_calls or () for key in call.keys}
        for message in self.o.messages:
            if message.verified or self.per[message.pair]:
                continue
            if reply_key(*message.pair) in seen:  # covered by a reply written with it
                self.fail("nothing_unverified", message.pair, "a writer call saw it")

    def superseded_and_sent(self) -> None:
        """An approved draft with an email of its own that a newer sent reply covers: it was
        approved after the newer message superseded it, and the message is answered twice."""
        for key, record in self.o.ledger.items():
            coverer = self.by_key.get(key)
            if record.state is not ReplyState.SENT or not record.covers or not coverer:
                continue
            if self.per[coverer] == 0:
                continue
            for covered in record.covers:
                pair, draft = self.by_key.get(covered), self.o.ledger.get(covered)
                if covered == key or pair is None or draft is None or draft.approval is None:
                    continue
                if self.per[pair] >= 1:
                    detail = f"sent, and the newer reply {key} covers it (superseded)"
                    self.fail("draft_approved", covered, detail)

    def drafts(self) -> None:
        """A sent draft: a text a person approved (the applied decision's, where known);
        never a rejected one."""
        decided: dict[str, list[Decision]] = {}
        for decision in self.o.decisions:
            decided.setdefault(decision.key, []).append(decision)
        for key in sorted(self.o.drafts):
            pair = self.by_key.get(key)
            if pair is None or self.per[pair] == 0:
                continue
            made = decided.get(key, [])
            applied = [d for d in made if d.applied]
            if any(d.action == "reject" for d in applied):
                self.fail("draft_approved", key, "a draft sent after its rejection was applied")
            approved = [d.text for d in (applied or made) if d.action in ("approve", "edit")]
            if not approved:
                self.fail("draft_approved", key, "a draft sent with no approval")
            elif self.texts.get(pair) not in approved:
                self.fail("draft_approved", key, "sent with a text no approval gave")

    def ledger_agrees(self) -> None:
        if not self.o.settled:
            return
        for key, record in self.o.ledger.items():
            pair = self.by_key.get(key)
            if pair is None:
                continue
            if record.state is ReplyState.SENT and self.per[pair] == 0:
                self.fail("ledger_agrees", key, "recorded sent, no email")
            if self.per[pair] and record.state not in (ReplyState.SENT,):
                self.fail("ledger_agrees", key, f"an email, recorded {record.state.value}")

    def within_rate(self) -> None:
        rpm = self.o.rpm
        if rpm is None or not self.o.writer_starts:
            return
        most, at = busiest_window(self.o.writer_starts, RATE_WINDOW_S)
        if most > rpm:
            detail = f"{most} writer calls started in the 60 s from {at:.3f} s; the rpm is {rpm:g}"
            self.fail("within_rate", "the group", detail)


#: the window the group's requests-per-minute limit is judged over
RATE_WINDOW_S = 60.0


def busiest_window(times: Sequence[float], window_s: float) -> tuple[int, float]:
    """The most of ``times`` in any half-open window ``window_s`` long, and where it starts."""
    ordered = sorted(times)
    most, start, j = 0, ordered[0] if ordered else 0.0, 0
    for i, at in enumerate(ordered):
        while ordered[j] <= at - window_s:
            j += 1
        if i - j + 1 > most:
            most, start = i - j + 1, ordered[j]
    return most, start


def most_in_window(times: Sequence[float], window_s: float) -> int:
    """The most of ``times`` in any half-open window ``window_s`` long."""
    return busiest_window(times, window_s)[0]


def check(observed: Observed) -> Verdict:
    """Judge a run: each verified message's outcome, and every invariant it broke."""
    judge = _Judge(observed)
    outcomes = {m.pair: judge.outcome(m) for m in observed.messages if m.verified}
    judge.emails()
    judge.superseded_and_sent()
    judge.drafts()
    judge.ledger_agrees()
    judge.within_rate()
    return Verdict(outcomes, tuple(judge.violations))


def emails_from_outbox(entries: Iterable[Mapping[str, object]]) -> tuple[Email, ...]:
    """Emails from the fake mail servers' outbox entries (``inbox_id``,
    ``replied_to_message_id``, ``text``)."""
    return tuple(
        Email(str(e["inbox_id"]), str(e["replied_to_message_id"]), _text(e.get("text")))
        for e in entries
    )


def _text(value: object) -> str | None:
    return None if value is None else str(value)
