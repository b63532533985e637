"""The effect ledger for events that are not mail (Stripe, GitHub, Standard Webhooks).

A handler, named by ``ONCEONLY_EVENT_HANDLER="module:function"``, gets each deduped,
reordered event and an :class:`Effects` object. Every irreversible thing it does goes
through ``effects.once(action, payload, perform)``:

* the effect key is ``effect-`` + the provider, the event id and the action name;
* the canonical payload hash (sorted-key JSON, SHA-256) is stored with the key, in the
  compacted ledger, acknowledged by the broker, *before* ``perform(key)`` runs;
* ``perform`` receives the key, to pass on as the callee's own idempotency key;
* a repeat with the same payload returns the stored result without performing again;
* a second use of a key with a *different* payload is refused (:class:`EffectConflict`)
  and the worker dead-letters the event.

Example handler::

    async def handle(envelope, effects):
        event = envelope.payload()
        if event["type"] == "invoice.paid":
            await effects.once("send_receipt", {"invoice": event["data"]["object"]["id"]},
                               lambda key: receipts.send(..., idempotency_key=key))
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

import structlog

from onceonly.processors.exceptions import ProcessorError
from onceonly.schemas.effect import EffectRecord, EffectState
from onceonly.schemas.envelope import Envelope

log = structlog.get_logger("onceonly.effects")


class EffectConflict(ProcessorError):
    """An effect key was used again with a different payload: a bug, never a retry."""


def effect_key(subject: Envelope | str, action: str) -> str:
    """``effect-<sha256(subject, action)>``: stable, and safe as any API's key.

    The subject is an event (its ``provider:event_id``) for event handlers, and the
    answered message's reply key for reply writers.
    """
    basis = subject.dedupe_key if isinstance(subject, Envelope) else subject
    digest = hashlib.sha256(f"{basis}\n{action}".encode()).hexdigest()
    return f"effect-{digest}"


def payload_hash(payload: Mapping[str, Any]) -> str:
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


class EffectPlan(StrEnum):
    PERFORM = "perform"
    DONE = "done"
    CONFLICT = "conflict"


def decide_effect(record: EffectRecord | None, digest: str) -> EffectPlan:
    if record is not None and record.payload_hash != digest:
        return EffectPlan.CONFLICT
    if record is not None and record.state is EffectState.DONE:
        return EffectPlan.DONE
    return EffectPlan.PERFORM  # new, or pending: perform again with the same key


class RawLedger(Protocol):
    def get_raw(self, key: str) -> bytes | None: ...

    async def put_raw(self, key: str, value: bytes) -> None: ...


Perform = Callable[[str], Any]
EventHandler = Callable[[Envelope, "Effects"], Awaitable[None] | None]


class Effects:
    """What a handler may do once: ``await effects.once(action, payload, perform)``.

    ``subject`` is the event (handlers) or the answered message's reply key (writers);
    the effect key is that subject and the action.
    """

    def __init__(
        self,
        subject: Envelope | str,
        ledger: RawLedger,
        now: Callable[[], datetime],
        *,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.subject = subject
        self.ledger = ledger
        self.now = now
        self.loop = loop  #: the worker's event loop, for ``once_sync`` from a writer's thread

    @property
    def _name(self) -> str:
        return (
            f"event {self.subject.event_id}"
            if isinstance(self.subject, Envelope)
            else f"message {self.subject}"
        )

    def once_sync(self, action: str, payload: Mapping[str, Any], perform: Perform) -> Any:
        """``once`` for a sync reply writer, which runs in a thread beside the event loop."""
        loop = self.loop
        if loop is None:
            raise RuntimeError("once_sync() is for sync writers run by the worker")
        return asyncio.run_coroutine_threadsafe(self.once(action, payload, perform), loop).result()

    async def once(self, action: str, payload: Mapping[str, Any], perform: Perform) -> Any:
        """Perform ``action`` once for this subject: ``perform(key)`` runs only if the
        ledger has no finished record of it, and its result is recorded and returned; a
        repeat returns the recorded result. The payload's hash is recorded (acknowledged
        by the broker) before ``perform`` runs, and ``key`` is meant to be passed on as
        the callee's own idempotency key. The same action with another payload raises
        [`EffectConflict`][onceonly.EffectConflict]."""
        key = effect_key(self.subject, action)
        digest = payload_hash(payload)
        raw = self.ledger.get_raw(key)
        record = EffectRecord.decode(raw) if raw is not None else None
        ids = {"key": key, "action": action, "subject": self._name}
        match decide_effect(record, digest):
            case EffectPlan.CONFLICT:
                raise EffectConflict(
                    f"effect {action!r} of {self._name} was recorded with "
                    "another payload; refusing to perform it again: inspect the dead letter"
                )
            case EffectPlan.DONE:
                assert record is not None
                log.info("effect skipped: already done", **ids)
                return record.result
        if record is None:
            record = EffectRecord(key, digest, EffectState.PENDING, self.now().isoformat())
            await self.ledger.put_raw(key, record.encode())  # acknowledged before acting
        result = perform(key)
        if inspect.isawaitable(result):
            result = await result
        await self.ledger.put_raw(
            key, replace(record, state=EffectState.DONE, result=result).encode()
        )
        log.info("effect done", **ids)
        return result


async def run_handler(handler: EventHandler, envelope: Envelope, effects: Effects) -> None:
    outcome = handler(envelope, effects)
    if inspect.isawaitable(outcome):
        await outcome
