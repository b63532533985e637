"""The chaos writer (chaos/writers.py) and the reading of its log (chaos/writer_log.py):
slow calls with a new text each, every call logged, the calls in flight, the writer calls
per message."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from chaos import writers
from chaos.writer_log import Call, WriterFigures, WriterLog
from chaos.writers import WriterConfig, compose, parse_range
from tests.unit.chaos._messages import inbound


def test_parse_range_reads_a_span_or_one_value_and_refuses_the_rest() -> None:
    assert parse_range("1-8") == (1.0, 8.0)
    assert parse_range(" 15-20 ") == (15.0, 20.0)
    assert parse_range("5") == (5.0, 5.0)
    for bad in ("8-1", "x", "-1-2", ""):
        with pytest.raises(ValueError):
            parse_range(bad)


def test_config_goes_through_the_environment_unchanged(tmp_path: Path) -> None:
    config = WriterConfig((0.5, 2.0), (10.0, 20.0), 0.25, tmp_path)

    assert WriterConfig.from_env(config.env()) == config
    assert WriterConfig.from_env({}) == WriterConfig()


def test_draw_takes_the_long_span_for_its_share_of_calls() -> None:
    config = WriterConfig((1.0, 2.0), (30.0, 60.0), 0.25)
    rng = random.Random(3)
    lengths = [config.draw(rng) for _ in range(4000)]

    assert all(1.0 <= s <= 2.0 or 30.0 <= s <= 60.0 for s in lengths)
    assert 0.2 < sum(s >= 30.0 for s in lengths) / len(lengths) < 0.3


def test_every_text_is_new_and_names_the_latest_message() -> None:
    rng = random.Random(1)
    burst = [inbound(1), inbound(2)]
    texts = {compose(burst, rng) for _ in range(200)}

    assert len(texts) == 200
    assert all("<m2@x>" in t and "your 2 messages" in t for t in texts)


async def test_slow_logs_a_start_and_an_end_with_the_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ONCEONLY_WORKER_ID", "chaos-w1")
    for name, value in WriterConfig((0.0, 0.01), (0.0, 0.01), 0.0, tmp_path).env().items():
        monkeypatch.setenv(name, value)
    writers._state.cache_clear()
    try:
        text = await writers.slow([inbound(1), inbound(2)])
    finally:
        writers._state.cache_clear()

    (path,) = tmp_path.glob("writer-chaos-w1-*.jsonl")
    start, end = (json.loads(line) for line in path.read_text().splitlines())
    assert start["event"] == "start" and start["worker"] == "chaos-w1"
    assert start["keys"] == [inbound(1).key, inbound(2).key]
    assert end == {
        "event": "end",
        "call": start["call"],
        "t": end["t"],
        "text": text,
        "draft": False,
    }

    log = WriterLog(tmp_path)
    log.refresh()
    (call,) = log.calls.values()
    assert call.text == text and not call.in_flight and call.pid == start["pid"]


def _line(**fields: object) -> str:
    return json.dumps(fields) + "\n"


def test_the_log_is_read_as_it_grows_whole_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "writer-chaos-w1-11.jsonl"
    start = _line(event="start", call="11-1", t=1.0, worker="chaos-w1", pid=11, keys=["k1"])
    path.write_text(start + _line(event="start", call="11-2", t=1.5, worker="w", pid=11)[:20])
    log = WriterLog(tmp_path)
    log.refresh()

    assert [c.call for c in log.in_flight([11])] == ["11-1"]
    assert log.in_flight([12, None]) == []

    with path.open("a") as out:  # the rest of the half-written line, then an end
        out.write(_line(event="start", call="11-2", t=1.5, worker="w", pid=11, keys=["k2"])[20:])
        out.write(_line(event="end", call="11-1", t=4.0, text="hello"))
    log.refresh()

    assert [c.call for c in log.in_flight([11])] == ["11-2"]
    assert log.calls["11-1"].ended == 4.0 and log.by_text()["hello"].call == "11-1"
    assert log.bad_lines == 0
    assert [c.call for c in log.for_key("k2")] == ["11-2"]


def call(n: str, pid: int, keys: tuple[str, ...], *, attempt: int = 1, ended: bool = True) -> Call:
    return Call(n, "w", pid, attempt, keys, 10.0, 1.0, 12.0 if ended else None, "t" + n)


def test_figures_count_each_call_for_every_message_of_its_burst() -> None:
    calls = [
        call("1", 1, ("a",)),
        call("2", 1, ("a", "b")),  # a rewrite with a newer message
        call("3", 2, ("b",)),  # another process asked again after a takeover
        call("4", 2, ("c",), attempt=2, ended=False),
        call("5", 2, ("zzz",)),  # not a planned message
    ]
    figures = WriterFigures.measure(calls, ["a", "b", "c", "d"])

    assert figures.per_message == {"a": 2, "b": 2, "c": 1, "d": 0}
    assert figures.mean == pytest.approx(5 / 4)
    assert figures.max == 2
    assert figures.asked_again == 2 and figures.by_several_processes == 1
    assert figures.never_asked == 1 and figures.retries == 1 and figures.unfinished == 1
    assert figures.longest_s == 2.0
    rows = dict(figures.rows())
    assert rows["writer calls per message"].startswith("mean 1.25, max 2 (5 calls for 4 messages")


def test_no_calls_say_so() -> None:
    assert WriterFigures.measure([], ["a"]).rows()[0][1].startswith("none logged")
