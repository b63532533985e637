"""The effect record: an irreversible step's key, its payload's hash and its state, kept
in the reply ledger (its compacted topic) beside the replies.

A JSON object: ``kind`` ``"effect"``, ``v`` (:data:`EFFECT_VERSION`), ``key``
(``effect-<sha256>``), ``payload_hash`` (sha256 of the canonical payload), ``state``
(``pending``: recorded before the step ran; ``done``: it returned ``result``),
``created_at`` and ``result``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from onceonly.schemas.exceptions import SchemaError

EFFECT_VERSION = 1


class EffectState(StrEnum):
    PENDING = "pending"
    DONE = "done"


@dataclass(frozen=True, slots=True)
class EffectRecord:
    key: str
    payload_hash: str
    state: EffectState
    created_at: str
    result: Any = None
    kind: str = "effect"
    v: int = EFFECT_VERSION

    def encode(self) -> bytes:
        data = asdict(self)
        data["state"] = self.state.value
        return json.dumps(data, separators=(",", ":"), default=str).encode()

    @classmethod
    def decode(cls, value: bytes) -> EffectRecord:
        try:
            data = json.loads(value)
            if data.get("kind") != "effect" or data.get("v") != EFFECT_VERSION:
                raise SchemaError(f"not an effect record of version {EFFECT_VERSION}")
            data["state"] = EffectState(data["state"])
            return cls(**data)
        except SchemaError:
            raise
        except (ValueError, TypeError, KeyError) as exc:
            raise SchemaError(f"effect record cannot be decoded: {exc!r}") from exc
