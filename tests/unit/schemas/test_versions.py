"""Each record on the wire: its encoding decodes to it unchanged, and a version it does not
know is refused, saying so."""

from __future__ import annotations

from typing import Any

import pytest

from onceonly.schemas.exceptions import SchemaError
from tests.unit.schemas._samples import DECISION, ENVELOPE, FULL, changed

RECORDS = {"envelope": ENVELOPE, "approval decision": DECISION, "ledger record": FULL}


@pytest.mark.parametrize("record", RECORDS.values(), ids=RECORDS.keys())
def test_a_record_survives_encoding_unchanged(record: Any) -> None:
    assert type(record).decode(record.encode()) == record


@pytest.mark.parametrize(
    ("record", "version", "says"),
    [
        (ENVELOPE, 99, "upgrade the worker"),  # ingest is newer: the advice
        (DECISION, 7, "version 7"),
        (FULL, 99, "version 99"),
    ],
    ids=RECORDS.keys(),
)
def test_a_record_of_an_unknown_version_is_refused(record: Any, version: int, says: str) -> None:
    with pytest.raises(SchemaError, match=says):
        type(record).decode(changed(record, v=version))
