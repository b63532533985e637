"""FaustTable.get over a real faust table and its RocksDB store (no broker needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import faust
import pytest
from faust.sensors import Sensor

from onceonly.processors.runtime.tables import FaustTable


class _Gets(Sensor):
    """Counts faust's table-get notifications."""

    def __init__(self) -> None:
        super().__init__()
        self.gets = 0

    def on_table_get(self, table: Any, key: Any) -> None:
        self.gets += 1


@pytest.fixture
def table(tmp_path: Path) -> Any:
    app = faust.App(
        "tables-test", broker="kafka://127.0.0.1:1", store="rocksdb://", datadir=str(tmp_path)
    )
    # as onceonly's topology makes them: bytes, raw, no default
    made = app.Table("holds", default=None, partitions=1, key_type=bytes, value_type=bytes)
    made.data._db_for_partition(0)[b"thread-1"] = b"buffer"
    return made


def test_get_answers_what_the_faust_table_answers(table: Any) -> None:
    ours = FaustTable(table)
    assert ours.get(b"thread-1") == table.get(b"thread-1") == b"buffer"
    assert ours.get(b"thread-2") is table.get(b"thread-2") is None
    assert type(ours.get(b"thread-1")) is bytes


def test_get_reads_the_store_without_faust_sensor_calls(table: Any) -> None:
    # the worker reads its tables several times per reply; faust's Table.get reads RocksDB
    # twice and notifies every sensor each time, which onceonly never reads (issue 46)
    sensor = _Gets()
    table.app.sensors.add(sensor)
    FaustTable(table).get(b"thread-1")
    FaustTable(table).get(b"thread-2")
    assert sensor.gets == 0
    table.get(b"thread-1")
    assert sensor.gets == 1  # the sensor is live: faust's own get reaches it


async def test_delete_through_sends_the_tombstone_before_it_deletes_from_the_store(
    table: Any,
) -> None:
    from types import SimpleNamespace

    sent: list[tuple[int, bytes, Any, bytes | None]] = []

    async def send_changelog(partition: int, key: bytes, value: Any) -> Any:
        sent.append((partition, key, value, FaustTable(table).get(key)))
        return SimpleNamespace(topic_partition=SimpleNamespace(partition=partition), offset=41)

    table.send_changelog = send_changelog
    where = await FaustTable(table).delete_through(b"thread-1", 0)

    # the topic has the tombstone while the store still held the record; then it is gone
    assert sent == [(0, b"thread-1", None, b"buffer")]
    assert where == (0, 41) and FaustTable(table).get(b"thread-1") is None


@pytest.mark.parametrize("deleting", [False, True], ids=["write", "delete"])
async def test_a_write_the_broker_did_not_take_is_broker_unavailable_and_leaves_the_store(
    table: Any, deleting: bool
) -> None:
    """The seam in the worker's own table (runtime.broker_errors): the record may have
    landed or not, so the store keeps what it held and the worker's failure is raised."""
    from aiokafka.errors import NotEnoughReplicasError

    from onceonly.processors.exceptions import BrokerUnavailable

    async def send_changelog(partition: int, key: bytes, value: Any) -> Any:
        raise NotEnoughReplicasError()

    table.send_changelog = send_changelog
    ours = FaustTable(table)

    with pytest.raises(BrokerUnavailable) as raised:
        if deleting:
            await ours.delete_through(b"thread-1", 0)
        else:
            await ours.write_through(b"thread-1", b"newer", 0)

    assert isinstance(raised.value.__cause__, NotEnoughReplicasError)
    assert ours.get(b"thread-1") == b"buffer"
