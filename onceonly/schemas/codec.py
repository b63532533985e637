"""JSON through orjson, with the standard library's answer wherever orjson refuses.

orjson is several times faster on the hot paths (ingest parses every body and encodes
every envelope; the worker decodes every envelope). It accepts strictly RFC 8259 JSON;
the standard library also takes NaN and Infinity and lone surrogate escapes
(``"\\ud800"``). A verified body of that kind must not turn into a 400 that the provider
retries for days, so what orjson refuses goes through ``json`` as before: what is accepted,
and every error raised, stay what they were. orjson does not refuse an integer beyond 64
bits: it reads it as a float, silently (orjson 3.13), so a text that reads as anything with
a float in it is read again by ``json``, which keeps such an integer whole.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from onceonly.schemas.exceptions import SchemaError


def loads(text: str | bytes) -> Any:
    """``json.loads``, fast for the JSON orjson takes; raises what ``json.loads`` raises."""
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)
    return json.loads(text) if _has_float(data) else data


def _has_float(data: Any) -> bool:
    """Whether ``data`` holds a float anywhere (orjson's reading of a number may be one
    where ``json`` reads an integer: beyond 64 bits)."""
    stack = [data]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is float:
            return True
        if kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
    return False


def dumps_compact(data: Any) -> bytes:
    """Compact UTF-8 JSON (``json.dumps(..., ensure_ascii=False, separators=(",", ":"))``,
    byte for byte where ``data`` holds no float; a float's exponent may be written
    otherwise, ``1e-7`` against ``1e-07``, the same float read back); text that is not
    valid Unicode (a lone surrogate) raises UnicodeEncodeError, as the standard library's
    ``.encode()`` of it does. The bytes are a copy of their own size: orjson's keep the
    buffer they were written in (at least 4 KB), and a ledger record's are kept."""
    try:
        return bytes(memoryview(orjson.dumps(data)))
    except orjson.JSONEncodeError:
        return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()


def versioned(value: bytes | str, version: int, what: str) -> dict[str, Any]:
    """``value``'s JSON object if it is of ``version`` (its ``v``); else a SchemaError saying
    ``what`` of that version is not known. Invalid JSON raises what ``json.loads`` raises."""
    data = json.loads(value)
    if not isinstance(data, dict) or data.get("v") != version:
        found = data.get("v") if isinstance(data, dict) else None
        raise SchemaError(f"{what} version {found!r} is not known")
    return data
