"""The chaos run's approval mode (``--approvals SHARE``): which replies are drafts, what the
decider does with them, and how the end is judged. Pure: the decider's loop is in
``chaos/decider.py``.

A share of the messages need approval: the chaos writer (``chaos.writers:slow``, with
``ONCEONLY_APPROVAL=writer``) returns ``Draft(text, reason)`` when the burst's latest message
is among them, chosen from the run's seed and the message id (:func:`needs_approval`), so
every worker, every retry and every rewrite agrees. The decider lists the drafts and decides
on each at a random moment: approve as drafted, approve an edit, or reject, sometimes twice
(the same decision twice over the HTTP API, over the API and the CLI at once, or an
approval and an edit at once). The judge (:func:`judge`) then wants, for every reply the
decider decided on, what its ledger record and the mail server's outbox say to agree.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

SHARE_VAR = "CHAOS_APPROVAL_SHARE"
SEED_VAR = "CHAOS_APPROVAL_SEED"
REASON = "chaos: this message is in the approval share"

APPROVE = "approve"
EDIT = "edit"  #: an approval with an edited text
REJECT = "reject"

#: how a decision is made twice: not at all; the same decision twice over the HTTP API;
#: the same decision over the API and the CLI at once; an approval as drafted and an edit
#: at once (one wins, the other is refused)
ONCE = "once"
#: a draft still listed this long after its last decision is decided again
REDECIDE_S = 90.0
TWICE_API = "twice-api"
API_AND_CLI = "api+cli"
APPROVE_AND_EDIT = "approve+edit"


def needs_approval(seed: int, message_id: str, share: float) -> bool:
    """Whether the reply to ``message_id`` is a draft in the run with this seed: the same
    answer in every process (a hash, not a random draw), about ``share`` of the messages."""
    if share <= 0:
        return False
    digest = hashlib.sha256(f"{seed}:{message_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


@dataclass(frozen=True, slots=True)
class Choice:
    action: str  #: APPROVE, EDIT or REJECT
    twice: str  #: ONCE, TWICE_API, API_AND_CLI or APPROVE_AND_EDIT
    delay_s: float


def choose(
    rng: random.Random,
    delay_s: tuple[float, float] = (0.5, 20.0),
    edit: float = 0.25,
    reject: float = 0.2,
    twice: float = 0.3,
) -> Choice:
    """What the decider does with one draft, and when (seconds after it first saw it)."""
    roll = rng.random()
    action = REJECT if roll < reject else EDIT if roll < reject + edit else APPROVE
    mode = ONCE
    if rng.random() < twice:
        modes = [TWICE_API, API_AND_CLI] + ([APPROVE_AND_EDIT] if action != REJECT else [])
        mode = rng.choice(modes)
    return Choice(action, mode, rng.uniform(*delay_s))


def edited(text: str, tag: str) -> str:
    """The decider's edit of a draft: a new last line, so the sent text shows which edit."""
    return f"{text.rstrip()}\n\n(edited by the chaos decider, {tag})"


@dataclass(frozen=True, slots=True)
class Decision:
    """One decision the decider made and what it was answered."""

    key: str
    channel: str  #: "api" or "cli"
    action: str  #: APPROVE (as drafted or edited) or REJECT
    text: str | None  #: the text it approved (the draft's, or the edit); None: a rejection
    edit: bool
    status: str  #: applied, already, refused, waiting, or "error: ..." (no answer)
    at_s: float  #: s since the run's start

    def line(self) -> str:
        what = "reject" if self.action == REJECT else "edit" if self.edit else "approve"
        return f"[{self.at_s:7.1f}s] {self.channel} {what} {self.key}: {self.status}"


@dataclass
class ApprovalFigures:
    """The approval mode's part of the verdict."""

    drafts: int = 0  #: distinct drafts the decider saw listed
    decided: int = 0  #: distinct drafts it decided on
    decisions: Counter[str] = field(default_factory=Counter)  #: by action+edit
    answers: Counter[str] = field(default_factory=Counter)  #: by status
    twice: Counter[str] = field(default_factory=Counter)  #: drafts by how they were doubled
    sent: int = 0  #: decided drafts sent, with the approved text
    edited_sent: int = 0  #: of them, with an edited text
    rejected: int = 0  #: decided drafts declined (no email)
    superseded: int = 0  #: decided drafts covered by a newer message's reply
    redecided: int = 0  #: drafts still listed long after a decision, decided again
    undecided: list[str] = field(default_factory=list)  #: drafts still awaiting at the end
    problems: list[str] = field(default_factory=list)  #: each a broken promise

    @property
    def ok(self) -> bool:
        return not self.problems and not self.undecided

    def rows(self, rejected: int) -> list[tuple[str, str]]:
        """The report's rows; ``rejected``: the messages answered by a rejection (no email,
        those covered by a rejected draft too)."""
        return [
            (
                "approvals: drafts",
                f"{self.drafts:,} listed, {self.decided:,} decided; still awaiting at the end "
                f"{len(self.undecided):,} (target 0)",
            ),
            (
                "approvals: decisions",
                ", ".join(f"{k} {v:,}" for k, v in sorted(self.decisions.items())) or "-",
            ),
            (
                "approvals: answers",
                ", ".join(f"{k} {v:,}" for k, v in sorted(self.answers.items())) or "-",
            ),
            (
                "approvals: double decisions",
                ", ".join(f"{k} {v:,}" for k, v in sorted(self.twice.items()) if k != ONCE)
                + f"; decided again (still listed {REDECIDE_S:g} s on): {self.redecided:,}",
            ),
            (
                "approvals: outcome",
                f"{self.sent:,} sent as approved ({self.edited_sent:,} edited), "
                f"{self.rejected:,} rejected (no email; {rejected:,} messages answered by a "
                f"rejection), {self.superseded:,} superseded by a "
                f"newer message; broken: {len(self.problems):,} (target 0)",
            ),
        ]


def judge(
    decisions: Iterable[Decision],
    listed: Mapping[str, set[str]],
    twice: Mapping[str, str],
    ledger: Mapping[str, Any],
    emails: Mapping[str, list[str | None]],
) -> ApprovalFigures:
    """Every decided draft against its ledger record and its emails.

    ``listed``: each draft key the decider saw, with the texts it was listed with (one);
    ``twice``: how a key's decision was doubled; ``ledger``: reply key to its record (with
    ``state``, ``reply_text``); ``emails``: reply key to the texts of its emails.

    A draft approved (as drafted or edited) must have exactly one email, its text the
    ledger's, and that text one the decider approved (the one of a decision answered
    *applied*, if any). A rejected one: no email and *declined*, and a rejection was made.
    A superseded one (*covered*): no email of its own. One still *awaiting*: undecided.
    """
    figures = ApprovalFigures(drafts=len(listed), twice=Counter(twice.values()))
    by_key: dict[str, list[Decision]] = defaultdict(list)
    for d in decisions:
        by_key[d.key].append(d)
        kind = REJECT if d.action == REJECT else EDIT if d.edit else APPROVE
        figures.decisions[kind] += 1
        figures.answers[d.status.split(":")[0]] += 1
    figures.decided = len(by_key)
    for key in sorted(set(listed) | set(by_key)):
        record = ledger.get(key)
        state = getattr(getattr(record, "state", None), "value", None)
        if len(listed.get(key, ())) > 1:
            figures.problems.append(f"{key}: listed with {len(listed[key])} different texts")
        texts = emails.get(key, [])
        if state == "awaiting":
            figures.undecided.append(key)
            continue
        made = by_key.get(key, [])
        if not made:
            continue  # listed, then superseded or decided by no one here: checked below
        figures.problems += _check(key, state, record, made, texts, figures)
    return figures


def _check(
    key: str,
    state: str | None,
    record: Any,
    made: list[Decision],
    texts: list[str | None],
    figures: ApprovalFigures,
) -> list[str]:
    approved = {d.text for d in made if d.action != REJECT}
    applied = [d for d in made if d.status == "applied"]
    if state == "covered":
        figures.superseded += 1
        return [f"{key}: superseded, yet {len(texts)} emails of its own"] if texts else []
    if state == "declined":
        figures.rejected += 1
        out = [f"{key}: declined, yet {len(texts)} emails"] if texts else []
        if not any(d.action == REJECT for d in made):
            out.append(f"{key}: declined, but no rejection was made")
        out += [f"{key}: declined after an approval was applied" for d in applied if d.text]
        return out
    if state not in ("sent", "pending"):
        return [f"{key}: decided on, ledger state {state} (not sent, declined or superseded)"]
    if len(texts) != 1:
        return [f"{key}: approved, {len(texts)} emails (want exactly 1)"]
    sent = texts[0]
    out = []
    if sent != record.reply_text:
        out.append(f"{key}: the email's text is not the ledger's")
    if sent not in approved:
        out.append(f"{key}: the email's text is none of the approved texts")
    for d in applied:
        if d.action == REJECT:
            out.append(f"{key}: sent, but a rejection was answered applied")
        elif d.text != sent:
            out.append(f"{key}: the email's text is not the one answered applied")
    if not out:
        figures.sent += 1
        figures.edited_sent += any(d.edit and d.text == sent for d in made)
    return out
