"""Dead letters in the simulated world: the dead-letter topic, the operator who runs
``onceonly dead-letters retry``, and a forger who plants a letter on the topic.

The workers write their letters with the product's
:class:`~onceonly.processors.dead_letters.DeadLetters` (the reply path's through
:func:`~onceonly.processors.dead_letters.for_reply`, an approved draft's through
``applying._send``), each envelope with its MAC under the world's secret (:data:`KEY`, the
workers' ``ONCEONLY_ENVELOPE_SECRET``), onto :class:`Letters`' log through the worker's seam
(``broker_errors.Produced``): taken, or failed while writes expire (``Broker.dead_letter``).

A ``retry`` event is the operator's ``onceonly dead-letters retry`` with the secret: the
open letters (:func:`~onceonly.operations.replay.letters_with_outcomes` over the topic),
``missing_secret``, then what :func:`~onceonly.schemas.dead_letter.resendable` lets it send
(every MAC verified), produced to the deliveries partition as a replay (:class:`Resent`),
:func:`~onceonly.operations.replay.settle` for the letters it closes, and the ``retried``
note naming them. A member takes a resent record as the worker does: its MAC checked
(``has_valid_mac``; none valid: a ``bad_mac`` letter), its event claimed with the product's
dedupe (:func:`~onceonly.processors.dedupe.claims.claim`, replay: a failed event runs
again, a succeeded one is a duplicate), its message read by the AgentMail channel, and its
burst answered with ``replay`` set (a failed send's pending text is sent again with its key,
a writer's failure written again). The claims and outcomes go into the member's store of
the events table (:mod:`testkit.sim.events`), as an original webhook's do.

A ``forge`` event plants a letter whose envelope nobody delivered (a message
``<forgedN@sim>`` in a thread of the run), its MAC made under another key or missing. A
correct retry leaves it open; the planted bug ``dead-letter-no-mac-check`` sends every
envelope of the open letters signed with the secret, unchecked, so the worker takes it and
answers a message nobody sent (``nothing_unverified``).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from onceonly.ingest.normalise import agentmail as normalise
from onceonly.operations.replay import letters_with_outcomes, missing_secret, settle
from onceonly.processors.approval import applying
from onceonly.processors.dead_letters import DeadLetters, for_reply
from onceonly.processors.dedupe import decisions as dedupe
from onceonly.processors.dedupe.claims import claim
from onceonly.processors.exceptions import SendError, SendFailure
from onceonly.processors.mail.agentmail.channel import AgentMailChannel
from onceonly.processors.messages import Skip
from onceonly.processors.reorder.holds import Delivery
from onceonly.processors.reply.once import answered_by
from onceonly.processors.runtime.broker_errors import Produced
from onceonly.processors.writer.contract import Inbound
from onceonly.schemas import dead_letter
from onceonly.schemas.approval import ApprovalDecision
from onceonly.schemas.dead_letter import Check, Resend
from onceonly.schemas.envelope import Envelope, has_valid_mac, mac_of
from onceonly.schemas.ledger import ReplyRecord
from testkit.sim.approvals import ChannelMail, _Nothing
from testkit.sim.events import claim_original, finish_original
from testkit.sim.io import KAFKA, reach
from testkit.sim.mail import read as read_mail

if TYPE_CHECKING:
    from testkit.sim.member import Member
    from testkit.sim.world import World

#: the workers' ONCEONLY_ENVELOPE_SECRET, which the operator's retry holds too
KEY = b"sim-envelope-secret"
MAX_LETTER_BYTES = 1_000_000
#: what the router's letter says of a record without a valid MAC
BAD_MAC = "the record has no valid onceonly-mac under ONCEONLY_ENVELOPE_SECRET"


@dataclass(frozen=True, slots=True)
class Resent:
    """A record a retry produced to the deliveries partition, as a replay, or a catch-up
    fed (``replay`` False: a new event, :mod:`testkit.sim.catchup`)."""

    resend: Resend
    replay: bool = True

    @property
    def thread_key(self) -> str:
        return self.resend.envelope.thread_key


Item = Inbound | ApprovalDecision | Resent


def envelope_of(message: Inbound) -> Envelope:
    """The envelope ingest makes of ``message``'s AgentMail webhook."""
    body = {
        "inbox_id": message.inbox_id,
        "thread_id": message.thread_id,
        "message_id": message.message_id,
        "timestamp": message.occurred_at.isoformat(),
        "from": message.sender,
        "subject": message.subject,
        "text": message.text,
        "labels": list(message.labels),
    }
    webhook = {
        "type": "event",
        "event_type": "message.received",
        "event_id": message.event_id,
        "message": body,
    }
    return normalise(json.dumps(webhook), {}, message.occurred_at)


class FetchMail(ChannelMail):
    """The mail API as a member's channel reads a message (a letter's envelope has no body)."""

    def __init__(self, world: World, member: Member) -> None:
        super().__init__(world.mail, member.owns)
        self.world = world

    async def fetch(self, account: str, message_id: str) -> dict[str, Any]:
        def read() -> dict[str, Any]:
            message = self.world.letters.message(account, message_id)
            if message is None:
                raise SendError(SendFailure.REJECTED, f"message {message_id} not found", status=404)
            return json.loads(envelope_of(message).raw)["message"]  # type: ignore[no-any-return]

        out, back = self.mail._latency(), self.mail._latency()
        return await read_mail(out, read, back, f"a fetch of {message_id}")


class Letters:
    """The world's dead-letter topic, its events table, the operator and the forger."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.log: list[bytes] = []  #: the dead-letter topic's records
        topic = Produced(self, "dead-letter")  # the worker's seam: the broker away
        self.writer = DeadLetters(topic, _Nothing(), self._epoch, MAX_LETTER_BYTES, KEY)
        self.forged: list[Inbound] = []
        self.rng = random.Random(world.schedule.seed * 7937 + 19)
        self._claimed: set[int] = set()  #: offsets of resent records claimed
        self._envelopes: dict[str, Envelope] = {}
        self._channels: dict[str, AgentMailChannel] = {}
        self._messages: dict[tuple[str, str], Inbound] | None = None
        self._retries = 0

    def _epoch(self) -> float:
        return self.world.now().timestamp()

    def _now_ms(self) -> int:
        return int(self._epoch() * 1000)

    # -- the topic (what DeadLetters writes to) --------------------------------------------

    async def send(self, value: bytes) -> asyncio.Future[None]:
        await reach(KAFKA)  # a worker cut off from the broker: its produce leaves at the heal

        def land() -> None:
            self.log.append(value)
            letter, n = json.loads(value), len(self.log) - 1
            ids = [e.get("message_id") for e in letter.get("envelopes", ())]
            self.world.trace("letters", f"dead letter {n} {letter.get('check')} {ids}")

        return self.world.broker.dead_letter(land)

    def letters(self) -> list[Any]:
        """Every letter, with its latest retry (what ``onceonly dead-letters list`` reads)."""
        records = [(n, dead_letter.parse_record(v)) for n, v in enumerate(self.log)]
        return letters_with_outcomes(records)

    def open_pairs(self) -> dict[tuple[str, str], str]:
        """The messages an open letter names, with its check."""
        found: dict[tuple[str, str], str] = {}
        for letter in self.letters():
            for entry in letter.letter.get("envelopes", ()) if letter.open else ():
                pair = (str(entry.get("account_id")), str(entry.get("message_id")))
                found[pair] = str(letter.letter.get("check"))
        return found

    # -- the workers' side ---------------------------------------------------------------

    def envelope(self, item: Inbound | Resent) -> Envelope:
        if isinstance(item, Resent):
            return item.resend.envelope
        found = self._envelopes.get(item.event_id)
        if found is None:
            found = self._envelopes[item.event_id] = envelope_of(item)
        return found

    def message(self, account: str, message_id: str) -> Inbound | None:
        if self._messages is None:
            every = [*self.world.schedule.messages, *self.forged]
            self._messages = {(m.inbox_id, m.message_id): m for m in every}
        return self._messages.get((account, message_id))

    async def reply_letter(
        self,
        member: Member,
        record: ReplyRecord,
        reason: str,
        burst: Sequence[Any],
        taken: Sequence[int],
    ) -> None:
        """A failed reply's letter, with the envelopes of the messages it answers among
        those its burst claimed (``for_reply``), and those of the recalled messages of a
        draft it superseded made again from the ledger, as the worker's letter has them (F13);
        an approved draft sent alone (nothing taken) carries them all made again, as
        ``applying._send`` does."""
        part = self.world.part
        items = [part.deliveries[o] for o in taken]
        envelopes = [self.envelope(i) for i in items if not isinstance(i, ApprovalDecision)]
        parts = member.parts
        if not taken and parts is not None:
            envelopes = applying.again(parts, answered_by(member.ledger, record))
            burst = envelopes

        def again(unclaimed: Sequence[Inbound]) -> Sequence[Envelope]:
            # a superseded draft's messages, recalled from the thread (conversation._reply)
            found = applying.recorded(member.ledger, unclaimed)
            return applying.again(parts, found) if parts is not None else []

        await for_reply(self.writer, lambda: envelopes, again)(record, reason, burst)

    async def record_failed(self, burst: Sequence[Inbound], error: Exception) -> None:
        """A burst whose every try failed: its messages' letter (``Conversation._guarded``)."""
        envelopes = [self.envelope(m) for m in burst]
        await self.writer.record_failure(envelopes, check=Check.RECORD_FAILED, error=repr(error))

    def replayed(self, taken: Sequence[int]) -> bool:
        part = self.world.part
        return any(isinstance(part.deliveries[o], Resent) for o in taken)

    async def admit(
        self, member: Member, batch: Sequence[tuple[int, Item]]
    ) -> list[tuple[int, Inbound]]:
        """The messages of a lane's batch, by offset, as the worker takes them: each
        webhook's claimed in the member's events table (a duplicate of one claimed or
        finished before is left out), each resent record's too, after its MAC check (one
        without a valid MAC, a duplicate or a skip is left out)."""
        out: list[tuple[int, Inbound]] = []
        for offset, item in batch:
            if isinstance(item, Resent):
                inbound = await self._resent(member, offset, item)
                if inbound is not None:
                    out.append((offset, inbound))
            elif isinstance(item, Inbound):
                now_ms, since = self._now_ms(), member.read_from
                verdict = claim_original(member.events, item.event_id, offset, now_ms, since)
                if verdict is None:
                    out.append((offset, item))
                else:
                    self.world.trace(
                        member.name, f"delivery {offset} of {item.message_id} skipped: {verdict}"
                    )
        return out

    async def _resent(self, member: Member, offset: int, item: Resent) -> Inbound | None:
        """The router's MAC check, the dedupe claim (a replay unless a catch-up fed it), the
        channel's read."""
        resend = item.resend
        if not has_valid_mac(resend.value, resend.headers(), KEY):
            self.world.trace(member.name, f"resent record {offset} has no valid MAC")
            await self.writer.record_unreadable(resend.value, 0, offset, BAD_MAC, Check.BAD_MAC)
            return None
        envelope = Envelope.decode(resend.value)

        raced: list[Delivery] = []

        def skipped(delivery: Delivery, verdict: str) -> None:
            self.world.trace(member.name, f"resent {envelope.event_id} skipped: {verdict}")
            if dedupe.raced(verdict, delivery.replay):
                raced.append(delivery)

        delivery = Delivery(envelope, (0, offset), replay=item.replay)
        metrics = _Nothing()
        now_ms = self._now_ms()
        taken = claim(
            member.events,
            [delivery],
            now_ms=now_ms,
            metrics=metrics,
            on_skip=skipped,
            read_from=lambda partition: member.read_from,
        )
        if not taken:
            if raced:  # as Conversation.claim: the retry is dead-lettered again (F27)
                error = "the retry reached the worker while its event was being processed"
                await self.raced(envelope, error)
            return None
        self._claimed.add(offset)
        channel = self._channels.get(member.name)
        if channel is None:
            mail: Any = FetchMail(self.world, member)  # a MailClient's fetch, reply, find
            channel = self._channels[member.name] = AgentMailChannel(mail)
        try:
            inbound = await channel.inbound(envelope)
        except SendError as exc:
            await self.writer.record_failure([envelope], check=Check.FETCH_FAILED, error=str(exc))
            self._finish(member, delivery, False)
            return None
        if isinstance(inbound, Skip):
            self._finish(member, delivery, True)
            return None
        return inbound

    async def raced(self, envelope: Envelope, error: str) -> None:
        """A retry that did not run, dead-lettered again (``retry_raced``) with ``error``."""
        await self.writer.record_failure([envelope], check=Check.RETRY_RACED, error=error)

    def _finish(self, member: Member, delivery: Delivery, succeeded: bool) -> None:
        self._claimed.discard(delivery.position[1])
        entry = dedupe.finished(succeeded, position=delivery.position, now_ms=self._now_ms())
        member.events[delivery.envelope.dedupe_key.encode()] = json.dumps(entry.to_json()).encode()

    def finish(
        self, member: Member, taken: Sequence[int], succeeded: bool, failed: Collection[str] = ()
    ) -> None:
        """The events of a burst end: succeeded, or failed (dead-lettered); those of
        ``failed`` (messages whose reply ended failed, ``ended_failed``) failed whatever
        the burst did, as ``Conversation.act`` records them."""
        part = self.world.part
        for offset in taken:
            item = part.deliveries[offset]
            if isinstance(item, Inbound):
                ok = succeeded and item.event_id not in failed
                finish_original(
                    member.events, item.event_id, offset, ok, self._now_ms(), member.read_from
                )
            elif isinstance(item, Resent) and offset in self._claimed:
                envelope = item.resend.envelope
                ok = succeeded and envelope.event_id not in failed
                self._finish(member, Delivery(envelope, (0, offset), replay=item.replay), ok)

    # -- the operator and the forger -----------------------------------------------------

    def retry(self) -> None:
        """``onceonly dead-letters retry`` with the secret: the open letters, what may be
        sent of each, produced as a replay; the letters closed are noted retried."""
        letters = self.letters()
        chosen = [x for x in letters if x.open]  # the CLI's choice when no id is given
        refusal = missing_secret(letters, chosen, KEY)
        if refusal is not None:
            self.world.trace("operator", f"retry refused: {refusal}")
            return
        plans = [(x, self._plan(x.letter)) for x in chosen]
        acked: Counter[int] = Counter()
        for letter, planned in plans:
            for resend in planned if not isinstance(planned, str) else ():
                self.world.deliver(Resent(resend))
                acked[letter.offset] += 1
        report = settle(plans, acked, {})
        for offset, why in report.left_open:
            self.world.trace("operator", f"dead letter {offset} left open: {why[:80]}")
        self.world.trace("operator", f"retried {report.events} event(s) of {list(report.sent)}")
        if report.sent:
            self._retries += 1
            note = {
                "v": dead_letter.LETTER_VERSION,
                "kind": dead_letter.RETRIED_KIND,
                "letters": list(report.sent),
                "replay_id": f"retry{self._retries}",
                "at": self.world.now().isoformat(),
            }
            self.log.append(json.dumps(note).encode())

    def _plan(self, letter: dict[str, Any]) -> list[Resend] | str:
        if not self.world.bugs.dead_letter_no_mac_check:
            return dead_letter.resendable(letter, KEY)
        # the planted bug: every envelope sent, unchecked, signed with the secret
        unchecked = dead_letter.resendable(letter, None)
        if isinstance(unchecked, str):
            return unchecked
        return [Resend(r.envelope, mac_of(r.value, KEY)) for r in unchecked]

    def forge(self, variant: int) -> None:
        """A letter planted on the topic: an envelope nobody delivered, its MAC made under
        another key (``variant`` 0) or missing (1)."""
        threads = sorted({(m.inbox_id, m.thread_id) for m in self.world.schedule.messages})
        inbox, thread = threads[self.rng.randrange(len(threads))]
        n = len(self.forged)
        message = Inbound(
            inbox_id=inbox,
            message_id=f"<forged{n}@sim>",
            thread_key=f"agentmail:{thread}",
            thread_id=thread,
            event_id=f"forged{n}",
            occurred_at=self.world.now(),
            sender="mallory@example.com",
            subject="forged",
            text=f"forged {n}",
            labels=("received",),
        )
        self.forged.append(message)
        self._messages = None
        envelope = envelope_of(message)
        letter = dead_letter.failure_letter([envelope], Check.SEND_FAILED, "503", None)
        if variant == 0:
            letter["macs"] = [mac_of(envelope.encode(), b"not-the-secret").decode()]
        letter["at"] = self.world.now().isoformat()
        self.log.append(dead_letter.encode_letter(letter, MAX_LETTER_BYTES))
        self.world.trace("forger", f"dead letter {len(self.log) - 1} for {message.message_id}")
