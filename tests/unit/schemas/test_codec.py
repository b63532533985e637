"""The JSON codec: orjson's speed, the standard library's answers."""

from __future__ import annotations

import json
import math
import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onceonly.schemas.codec import dumps_compact, loads

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=400)
@given(value=_VALUES)
def test_a_text_reads_as_the_standard_library_reads_it(value: Any) -> None:
    text = json.dumps(value)

    assert repr(loads(text)) == repr(json.loads(text))
    assert repr(loads(text.encode())) == repr(json.loads(text.encode()))


@pytest.mark.parametrize("number", [2**64, 2**64 + 1, -(2**63) - 1, 123456789012345678901234567890])
def test_an_integer_beyond_64_bits_reads_whole(number: int) -> None:
    value = loads(f'{{"id": {number}, "n": [1, {number}]}}')

    assert value == {"id": number, "n": [1, number]}
    assert type(value["id"]) is int


def test_what_orjson_refuses_reads_as_the_standard_library_reads_it() -> None:
    value = loads('{"a": NaN, "b": Infinity, "c": "\\ud800"}')

    assert math.isnan(value["a"]) and value["b"] == math.inf and value["c"] == "\ud800"
    with pytest.raises(json.JSONDecodeError):
        loads("{")


@settings(max_examples=400)
@given(
    value=st.recursive(
        st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80) | st.text(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
        max_leaves=20,
    )
)
def test_a_value_without_floats_writes_the_standard_librarys_bytes(value: Any) -> None:
    try:
        expected = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:  # a lone surrogate: not UTF-8
        with pytest.raises(UnicodeEncodeError):
            dumps_compact(value)
        return

    assert dumps_compact(value) == expected


def test_written_bytes_hold_no_more_memory_than_their_length_needs() -> None:
    tracemalloc.start()
    try:
        kept = [dumps_compact({"text": "x" * 400, "i": i}) for i in range(200)]
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert held / len(kept) < 2 * len(kept[0])
