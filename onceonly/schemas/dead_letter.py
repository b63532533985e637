"""The dead-letter topic's records: the worker's letters and the notes of a retry.

A letter is a JSON object: ``v`` (:data:`LETTER_VERSION`; a letter without ``v`` is
version 1, written before letters carried MACs), ``reason`` (for a person), ``check`` (a
short name), ``at``, and what ``onceonly dead-letters retry`` may send again:
``envelopes`` and, under ONCEONLY_ENVELOPE_SECRET, ``macs``: each envelope's MAC (hex
HMAC-SHA256 of its compact encoding), in the same order. A record the worker could not
read or verify (``not_an_envelope``, ``bad_mac``) leaves ``partition``, ``offset`` and
``value`` instead: there is no envelope to send. A note is ``{"kind": "retried",
"letters": [ids], "at", "replay_id", "v"}``: those letters were sent again, and closed.

The topic itself carries no MAC: whoever can write to it can plant a letter. So a retry
sends an envelope only when its MAC verifies (:func:`resendable`), and a letter is
closed only when all it held reached the broker. The decisions here are pure.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from onceonly.schemas.envelope import MAC_HEADER, Envelope, mac_of
from onceonly.schemas.exceptions import SchemaError

#: 2 added ``v`` and ``macs``; version 1 letters still decode
LETTER_VERSION = 2
KNOWN_LETTER_VERSIONS = frozenset({1, 2})
#: a note of the topic that names the letters a retry sent again
RETRIED_KIND = "retried"


class Check(StrEnum):
    """Which check a dead letter failed: its ``check`` field."""

    #: the reply writer failed every attempt (or returned what no reply can be)
    WRITER_FAILED = "writer_failed"
    #: the mail API refused the send, or failed every attempt
    SEND_FAILED = "send_failed"
    #: processing the record failed every attempt
    RECORD_FAILED = "record_failed"
    #: the message could not be read from the mail API
    FETCH_FAILED = "fetch_failed"
    #: the record is not an envelope (no envelope to send again: the record is kept)
    NOT_AN_ENVELOPE = "not_an_envelope"
    #: the record has no valid MAC under ONCEONLY_ENVELOPE_SECRET (the record is kept)
    BAD_MAC = "bad_mac"
    #: a record of the topic that is not a JSON object, or a decision that cannot be read
    UNREADABLE = "unreadable"
    #: an effect's key was used again with another payload
    EFFECT_CONFLICT = "effect_conflict"
    #: ONCEONLY_EVENT_HANDLER raised (a handler is not retried)
    HANDLER_FAILED = "handler_failed"
    #: a dead letter's retry reached the worker while its event was being processed again
    #: (in progress, or held for its thread's window): it did not run; retry it again
    RETRY_RACED = "retry_raced"


#: the check of a record of the topic that is not a JSON object (onceonly never writes one)
UNREADABLE = Check.UNREADABLE
#: checks whose letter keeps the record itself, not envelopes
RECORD_CHECKS = frozenset({Check.BAD_MAC, Check.NOT_AN_ENVELOPE})
SECRET = "ONCEONLY_ENVELOPE_SECRET"
#: how ``dead-letters readmit`` is given the secret before a rotation
PREVIOUS_SECRET = "the previous secret (--previous-secret-file)"


def envelope_fields(envelopes: Sequence[Envelope], mac_key: bytes | None) -> dict[str, Any]:
    """A letter's ``envelopes``, and with ``mac_key`` their ``macs``."""
    fields: dict[str, Any] = {"envelopes": [e.to_json() for e in envelopes]}
    if mac_key is not None:
        fields["macs"] = [mac_of(e.encode(), mac_key).decode() for e in envelopes]
    return fields


def unreadable_letter(
    value: bytes | None, partition: int, offset: int, error: str, check: Check
) -> dict[str, Any]:
    """The letter of a record that was not processed: the record itself, where it was."""
    return {
        "reason": error,
        "check": check.value,
        "partition": partition,
        "offset": offset,
        "value": (value or b"").decode("utf-8", "replace")[:65536],
    }


def failure_letter(
    envelopes: Sequence[Envelope], check: Check, error: str, mac_key: bytes | None
) -> dict[str, Any]:
    """The letter of envelopes whose processing failed: what a retry sends again."""
    return {
        "reason": f"{check.value}: {error}",
        "check": check.value,
        "last_error": error,
        **envelope_fields(envelopes, mac_key),
    }


def reply_check(reason: str) -> Check:
    """A failed reply's check, from the reason its ledger record gives."""
    return Check.WRITER_FAILED if reason.startswith(Check.WRITER_FAILED) else Check.SEND_FAILED


def _dumps(letter: Mapping[str, Any]) -> bytes:
    return json.dumps(letter, ensure_ascii=False).encode()


def encode_letter(letter: dict[str, Any], max_bytes: int) -> bytes:
    """The letter as JSON within ``max_bytes``: too large, its envelopes are left out (their
    ids kept in ``envelopes_omitted``), then its long texts are cut. Always a JSON object."""
    value = _dumps({"v": LETTER_VERSION, **letter})
    if len(value) <= max_bytes:
        return value
    out = {"v": LETTER_VERSION, **letter}
    if out.get("envelopes"):
        out["envelopes_omitted"] = [
            {"event_id": e.get("event_id"), "provider": e.get("provider")} for e in out["envelopes"]
        ]
        out["envelopes"] = []
        out.pop("macs", None)
    for name in ("value", "last_error", "reason"):
        while isinstance(out.get(name), str) and out[name] and len(_dumps(out)) > max_bytes:
            out[name] = out[name][: len(out[name]) // 2]
    if len(_dumps(out)) > max_bytes:
        out.pop("record", None)
    return _dumps(out)


def parse_record(value: bytes | None) -> dict[str, Any]:
    """A record of the topic as a dict; one that is not a JSON object becomes a letter
    that says so (it holds nothing to send)."""
    try:
        parsed = json.loads(value or b"")
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        parsed = None
    if isinstance(parsed, dict):
        return parsed
    return {
        "check": UNREADABLE,
        "reason": "a record of the dead-letter topic that is not a JSON object: "
        "not a letter onceonly wrote",
    }


def noted_letters(note: Mapping[str, Any]) -> list[int]:
    """The letter ids a retry note names (a malformed entry is ignored)."""
    named = note.get("letters")
    if not isinstance(named, list):
        return []
    return [int(x) for x in named if isinstance(x, int) or (isinstance(x, str) and x.isdigit())]


@dataclass(frozen=True, slots=True)
class Resend:
    """One envelope a retry sends again: to the deliveries topic, keyed by its thread."""

    envelope: Envelope
    mac: bytes | None  #: the MAC of :attr:`value` under the worker's secret (None: no secret)

    @property
    def value(self) -> bytes:
        return self.envelope.encode()

    def headers(self) -> list[tuple[str, bytes]]:
        """The headers ingest gives the record (schema, provider, event id) and its MAC."""
        mac = [] if self.mac is None else [(MAC_HEADER, self.mac)]
        return [*self.envelope.headers(), *mac]


def carries_macs(letter: Mapping[str, Any]) -> bool:
    """True when the letter was written by a worker that checks MACs."""
    return bool(letter.get("macs")) or letter.get("check") == Check.BAD_MAC


def _version_problem(letter: Mapping[str, Any]) -> str | None:
    version = letter.get("v", 1)
    if version in KNOWN_LETTER_VERSIONS and not isinstance(version, bool):
        return None
    return (
        f"its version {version!r} is not known to this onceonly (it reads "
        f"{sorted(KNOWN_LETTER_VERSIONS)}); upgrade onceonly"
    )


def nothing_to_resend(letter: Mapping[str, Any]) -> str:
    """Why a letter without envelopes stays open (pure)."""
    check = letter.get("check")
    where = f"partition {letter.get('partition')} offset {letter.get('offset')}"
    if check == Check.BAD_MAC:
        return (
            f"it holds no envelope: the record at {where} of the deliveries topic had no "
            "valid MAC (forged, or written before the secret was set or rotated); if it is "
            "genuine, re-admit it: onceonly dead-letters readmit <id>"
        )
    if check == Check.NOT_AN_ENVELOPE or "offset" in letter:
        return f"it holds no envelope: the record at {where} was not one, so nothing can be sent"
    omitted = letter.get("envelopes_omitted")
    if isinstance(omitted, list) and omitted:
        events = ", ".join(str(e.get("event_id")) for e in omitted if isinstance(e, dict))
        return (
            f"its envelopes were too large to keep in the letter (events {events}); replay "
            f"the deliveries topic from before {letter.get('at')} (onceonly replay "
            "--from-time): failed events run again, answered ones do not"
        )
    if check == UNREADABLE:
        return "it is not a letter onceonly wrote: nothing to send"
    return "it holds nothing to send"


def _entries(letter: Mapping[str, Any]) -> list[Envelope] | str:
    entries = letter.get("envelopes")
    if not entries:
        return nothing_to_resend(letter)
    if not isinstance(entries, list):
        return "its envelopes are not a list: not a letter onceonly wrote"
    out = []
    for n, entry in enumerate(entries, 1):
        try:
            if not isinstance(entry, dict):
                raise SchemaError("not a JSON object")
            out.append(Envelope.from_json(entry))
        except SchemaError as exc:
            return f"its envelope {n} cannot be read: {exc}"
    return out


def _mac_at(letter: Mapping[str, Any], n: int) -> bytes | None:
    macs = letter.get("macs")
    if not isinstance(macs, list) or n >= len(macs) or not isinstance(macs[n], str):
        return None
    return str(macs[n]).encode()


def verifies(mac: bytes | None, value: bytes, key: bytes | None) -> bool:
    """True when ``mac`` is the MAC of ``value`` under ``key`` (constant time)."""
    return mac is not None and key is not None and hmac.compare_digest(mac, mac_of(value, key))


def resendable(letter: Mapping[str, Any], mac_key: bytes | None) -> list[Resend] | str:
    """What a retry may send of a letter, or why nothing (pure). With ``mac_key`` (the
    worker's secret) every envelope's MAC must verify: one that does not holds the whole
    letter, so a planted letter is never laundered into a signed record."""
    problem = _version_problem(letter)
    envelopes = problem or _entries(letter)
    if isinstance(envelopes, str):
        return envelopes
    out = []
    for n, envelope in enumerate(envelopes):
        value, mac = envelope.encode(), _mac_at(letter, n)
        if mac_key is not None and mac is None:
            return (
                "it carries no MAC: written by a worker without ONCEONLY_ENVELOPE_SECRET or "
                "before letters carried one, or planted by whoever can write to the "
                "dead-letter topic; not sent. If you know it is genuine (onceonly trace "
                f"{envelope.event_id}), onceonly dead-letters readmit <id> --vouch"
            )
        if mac_key is not None and not verifies(mac, value, mac_key):
            return (
                f"the MAC of event {envelope.event_id} does not verify under {SECRET}: "
                "written under another secret (re-admit it: onceonly dead-letters readmit "
                "<id> --previous-secret-file FILE) or forged; not sent"
            )
        signed = mac if mac_key is not None else None  # no secret anywhere: none to send
        out.append(Resend(envelope, signed))
    return out


@dataclass(frozen=True, slots=True)
class Original:
    """The deliveries record a ``bad_mac`` or ``not_an_envelope`` letter points at."""

    value: bytes | None
    mac: bytes | None  #: its ``onceonly-mac`` header, if it had one


def _vouched(mac: bytes | None, value: bytes, keys: Sequence[bytes], vouch: bool) -> bool:
    return vouch or any(verifies(mac, value, key) for key in keys)


def _refused(what: str) -> str:
    return (
        f"{what} verifies under neither {SECRET} nor {PREVIOUS_SECRET}: forged, or written "
        "before any secret was set; if you know it is genuine, readmit it with --vouch"
    )


def readmittable(
    letter: Mapping[str, Any],
    original: Original | None,
    *,
    current: bytes,
    previous: bytes | None,
    vouch: bool,
) -> list[Resend] | str:
    """What ``dead-letters readmit`` sends of a letter, signed with ``current``, or why
    nothing (pure): an envelope (or the deliveries record a ``bad_mac`` letter names)
    whose MAC verifies under ``previous`` or ``current``; anything with ``vouch``."""
    keys = [k for k in (previous, current) if k is not None]
    if _version_problem(letter) is None and letter.get("envelopes"):
        envelopes = _entries(letter)
        if isinstance(envelopes, str):
            return envelopes
        out = []
        for n, envelope in enumerate(envelopes):
            value = envelope.encode()
            if not _vouched(_mac_at(letter, n), value, keys, vouch):
                return _refused(f"the MAC of event {envelope.event_id}")
            out.append(Resend(envelope, None))
        return [_signed(r, current) for r in out]
    if letter.get("check") not in RECORD_CHECKS:
        return _version_problem(letter) or nothing_to_resend(letter)
    record = _record_value(letter, original, keys, vouch)
    if isinstance(record, str):
        return record
    try:
        envelope = Envelope.decode(record)
    except (SchemaError, RecursionError) as exc:
        return f"the record is not an envelope ({exc}): nothing to re-admit"
    return [_signed(Resend(envelope, None), current)]


def _record_value(
    letter: Mapping[str, Any], original: Original | None, keys: Sequence[bytes], vouch: bool
) -> bytes | str:
    """The deliveries record a letter names, if readmit may send it; else why not."""
    if original is not None and original.value is not None:
        if _vouched(original.mac, original.value, keys, vouch):
            return original.value
        return _refused("the record's MAC")
    kept = letter.get("value")
    if vouch and isinstance(kept, str):
        return kept.encode()
    return (
        "the deliveries topic no longer holds the record it names (kept 7 days); with "
        "--vouch, the copy kept in the letter is sent"
    )


def _signed(resend: Resend, key: bytes) -> Resend:
    return Resend(resend.envelope, mac_of(resend.value, key))
