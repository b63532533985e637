"""JSON through orjson, with the standard library's answer wherever orjson refuses.

orjson is several times faster on the hot paths (ingest parses every body and encodes
every envelope; the worker decodes every envelope). It accepts strictly RFC 8259 JSON;
the standard library also takes NaN and Infinity, integers beyond 64 bits and lone
surrogate escapes (``"\\ud800"``). A verified body of that kind must not turn into a 400
that the provider retries for days, so what orjson refuses goes through ``json`` as before:
what is accepted, and every error raised, stay what they were.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from onceonly.schemas.exceptions import SchemaError


def loads(text: str | bytes) -> Any:
    """``json.loads``, fast for the JSON orjson takes; raises what ``json.loads`` raises."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def dumps_compact(data: Any) -> bytes:
    """Compact UTF-8 JSON (``json.dumps(..., ensure_ascii=False, separators=(",", ":"))``);
    text that is not valid Unicode (a lone surrogate) raises UnicodeEncodeError, as the
    standard library's ``.encode()`` of it does."""
    try:
        return orjson.dumps(data)
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
