"""The group's rate limits and the model's pauses, as pure state under a test's own clock."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from email.utils import format_datetime
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onceonly.processors.flow.rate import (
    Gcra,
    Limits,
    ModelThrottled,
    Pause,
    model_of,
    retry_after_s,
)


def _starts(limits: Limits, arrivals: list[float], horizon: float) -> list[float]:
    """When each call starts if every call starts as soon as the limits allow (FIFO)."""
    started: list[float] = []
    now = 0.0
    for arrival in sorted(arrivals):
        now = max(now, arrival)
        now += limits.delay(now)
        if now > horizon:
            break
        limits.take(now)
        started.append(now)
    return started


def _most_in_any_window(starts: list[float], window: float) -> int:
    most, j = 0, 0
    for i, start in enumerate(starts):
        while starts[j] < start - window + 1e-9:
            j += 1
        most = max(most, i - j + 1)
    return most


@settings(max_examples=200, deadline=None)
@given(
    rpm=st.integers(min_value=1, max_value=6000),
    share=st.floats(min_value=0.05, max_value=1.0),
    arrivals=st.lists(st.floats(min_value=0, max_value=300), min_size=1, max_size=400),
    jitter=st.lists(st.floats(min_value=0, max_value=0.49), min_size=400, max_size=400),
)
def test_no_minute_at_the_model_holds_more_than_the_share_of_rpm(
    rpm: int, share: float, arrivals: list[float], jitter: list[float]
) -> None:
    # each request reaches the model up to 0.49 s after its admission
    limits = Limits(rpm=rpm, share=share)
    starts = _starts(limits, arrivals, horizon=600)
    at_model = sorted(s + j for s, j in zip(starts, jitter, strict=False))
    assert _most_in_any_window(at_model, 60.0) <= math.ceil(rpm * share - 1e-9)


def test_calls_offered_faster_than_the_rate_start_at_the_rate() -> None:
    limits = Limits(rpm=600, share=0.5)  # 5 calls a second for this worker, over 60.5 s
    starts = _starts(limits, [0.0] * 100, horizon=1000)
    assert len(starts) == 100
    assert starts[-1] == pytest.approx(99 * 60.5 / 300)


def test_the_shares_of_two_workers_add_up_to_the_group_rate() -> None:
    # the regression this guards: a limit applied per worker doubles the group's rate;
    # and each request reaches the model a moment after its admission (the bench's 601)
    a, b = Limits(rpm=600, share=0.5), Limits(rpm=600, share=0.5)
    late = [0.3 if n % 7 == 0 else 0.0 for n in range(400)]
    both = _starts(a, [0.0] * 400, 120) + _starts(b, [0.0] * 400, 120)
    at_model = sorted(s + j for s, j in zip(both, late * 2, strict=False))
    assert _most_in_any_window(at_model, 60.0) <= 600


@settings(max_examples=300, deadline=None)
@given(
    rpm=st.integers(min_value=1, max_value=1200),
    owned=st.lists(st.integers(min_value=1, max_value=6), min_size=2, max_size=6),
    jitter=st.lists(st.floats(min_value=0, max_value=0.49), min_size=64, max_size=64),
)
def test_the_workers_whole_calls_a_minute_add_up_to_at_most_the_group_rpm(
    rpm: int, owned: list[int], jitter: list[float]
) -> None:
    # workers owning ``owned`` partitions each, every one calling as fast as its share lets
    # it: no 60 s at the model holds more than the rpm while each partition is worth a call
    # a minute (rpm >= partitions); below that, each worker still makes one a minute. Shares
    # paced as fractions made ceil(x) calls a window each, and 2 x 31 at 61 rpm
    partitions = sum(owned)
    starts: list[float] = []
    for n in owned:
        starts += _starts(Limits(rpm=rpm, share=n / partitions), [0.0] * 3000, horizon=300)
    at_model = sorted(s + jitter[i % 64] for i, s in enumerate(starts))
    if rpm >= partitions:
        assert _most_in_any_window(at_model, 60.0) <= rpm
    else:
        assert _most_in_any_window(at_model, 60.0) <= len(owned) + rpm


def test_a_share_rising_from_zero_waits_one_interval_before_its_first_call() -> None:
    # its partitions were paced by their last owner until a moment ago
    limits = Limits(rpm=60, share=0.0)
    limits.set_share(0.5, now=100.0)  # 30 calls a minute, over 60.5 s
    assert limits.delay(100.0) == pytest.approx(60.5 / 30)
    assert limits.delay(100.0 + 60.5 / 30) == 0.0


def test_a_share_rising_from_zero_first_waits_out_its_last_calls_interval() -> None:
    limits = Limits(rpm=60, share=0.5)
    limits.take(99.0)  # its last call at 30 a minute: the next not before 101.02
    limits.set_share(0.0, now=99.5)  # a rebalance revoked its partitions
    limits.set_share(0.25, now=100.0)  # 15 a minute from the end of that interval
    assert limits.delay(100.0) == pytest.approx(99.0 + 60.5 / 30 + 60.5 / 15 - 100.0)


def test_a_share_that_changes_but_never_was_zero_keeps_its_pace() -> None:
    limits = Limits(rpm=60, share=0.5)
    limits.take(10.0)
    limits.set_share(0.25, now=10.5)  # 15 a minute from the call at 10.0: not one more wait
    assert limits.delay(10.0 + 60.5 / 30) == 0.0


def test_a_share_of_zero_waits_forever_and_a_new_share_lets_calls_go() -> None:
    limits = Limits(rpm=60, share=0.0)
    assert limits.delay(0.0) == float("inf")
    limits.set_share(1.0)
    assert limits.delay(0.0) == 0.0


def test_no_limits_never_wait() -> None:
    limits = Limits()
    assert not limits.active
    for _ in range(1000):
        assert limits.delay(0.0) == 0.0
        limits.take(0.0)


def test_tokens_are_charged_at_the_estimate_then_at_the_reported_mean() -> None:
    limits = Limits(tpm=6000, estimate=500.0, spread_s=60)  # 100 tokens a second
    assert limits.take(0.0) == 500.0
    assert limits.delay(0.0) == pytest.approx(5.0)  # 500 tokens at 100 a second
    # the first call reported 100 tokens: 400 given back, and the next is charged 100
    limits.settle(0.0, 500.0, 100.0)
    assert limits.tokens_per_call() == 100.0
    assert limits.delay(0.0) == pytest.approx(1.0)
    assert limits.take(1.0) == 100.0


def test_a_dear_call_still_starts_and_the_next_waits_for_its_cost() -> None:
    limits = Limits(tpm=60, estimate=1.0, spread_s=60)  # 1 token a second
    limits.take(0.0)
    limits.settle(0.0, 1.0, 10.0)  # it used 10 tokens
    assert limits.delay(0.0) == pytest.approx(10.0)


@settings(max_examples=200, deadline=None)
@given(
    costs=st.lists(st.integers(min_value=1, max_value=5000), min_size=1, max_size=200),
    tpm=st.integers(min_value=600, max_value=600_000),
)
def test_tokens_over_time_stay_within_tpm_plus_one_call(costs: list[int], tpm: int) -> None:
    limits = Limits(tpm=tpm, estimate=float(costs[0]))
    now, first = 0.0, None
    spent = 0
    for cost in costs:
        now += limits.delay(now)
        charged = limits.take(now)
        limits.settle(now, charged, float(cost))
        first = now if first is None else first
        spent += cost
    # what was spent before the last call started was allowed by the time it started
    allowed = (now - first) * tpm / 60 + max(costs) + limits.tokens_per_call() + max(costs)
    assert spent - costs[-1] <= allowed + 1e-6


def test_gcra_with_a_burst_lets_that_many_go_at_once() -> None:
    gcra = Gcra(rate=1.0, burst=3.0)
    for _ in range(3):
        assert gcra.delay(10.0) == 0.0
        gcra.take(10.0)
    assert gcra.delay(10.0) == pytest.approx(1.0)


def test_a_pause_holds_new_calls_then_lets_one_probe() -> None:
    pause = Pause()
    assert pause.throttled(now=0.0, retry_after_s=2.0)
    assert pause.delay(1.0) == pytest.approx(1.0)
    assert pause.delay(2.0) == 0.0
    assert pause.start() is True  # the probe
    assert pause.delay(2.1) is None  # the others wait for its outcome
    pause.ended(probe=True, ok=True)
    assert pause.delay(2.2) == 0.0
    assert pause.start() is False  # no more probing


def test_a_throttled_probe_pauses_again() -> None:
    pause = Pause()
    pause.throttled(0.0, 2.0)
    pause.start()
    assert pause.throttled(2.5, 2.0)
    assert pause.delay(3.0) == pytest.approx(1.5)


def test_a_probe_that_fails_otherwise_lets_another_probe() -> None:
    pause = Pause()
    pause.throttled(0.0, 1.0)
    assert pause.start()
    pause.ended(probe=True, ok=False)
    assert pause.delay(1.5) == 0.0
    assert pause.start() is True


def test_a_probe_answered_after_its_timeout_ends_the_probing() -> None:
    pause = Pause()
    pause.throttled(0.0, 1.0)
    assert pause.start()
    sent_in = pause.throttles
    pause.ended(probe=True, ok=False)  # given up at its timeout; its thread runs on
    pause.answered_late(sent_in)  # the model answered it
    assert pause.start() is False  # no more probing


def test_a_probe_answered_late_after_another_429_leaves_the_probing_on() -> None:
    pause = Pause()
    pause.throttled(0.0, 1.0)
    assert pause.start()
    sent_in = pause.throttles
    pause.ended(probe=True, ok=False)
    pause.throttled(2.0, 1.0)  # another call was answered 429 since the probe started
    pause.answered_late(sent_in)
    assert pause.delay(3.0) == 0.0
    assert pause.start() is True  # still probing


def test_a_shorter_retry_after_does_not_shorten_a_pause() -> None:
    pause = Pause()
    pause.throttled(0.0, 10.0)
    assert not pause.throttled(1.0, 2.0)
    assert pause.delay(5.0) == pytest.approx(5.0)


def _status(status: int, headers: dict[str, str]) -> Exception:
    exc = Exception("status")
    exc.status_code = status  # type: ignore[attr-defined]
    exc.response = SimpleNamespace(headers=headers)  # type: ignore[attr-defined]
    return exc


def test_retry_after_is_read_from_a_429() -> None:
    assert retry_after_s(_status(429, {"retry-after": "2"}), 0.0) == 2.0
    assert retry_after_s(_status(429, {"retry-after-ms": "1500"}), 0.0) == 1.5
    at = datetime(2026, 12, 2, 12, 0, 10, tzinfo=UTC)
    now = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC).timestamp()
    date = format_datetime(at, usegmt=True)
    assert retry_after_s(_status(429, {"retry-after": date}), now) == pytest.approx(10.0)


def test_no_pause_without_a_429_or_a_retry_after() -> None:
    assert retry_after_s(_status(503, {"retry-after": "2"}), 0.0) is None
    assert retry_after_s(_status(429, {}), 0.0) is None
    assert retry_after_s(_status(429, {"retry-after": "soon"}), 0.0) is None
    assert retry_after_s(RuntimeError("429"), 0.0) is None


def test_a_writer_may_say_throttled_itself() -> None:
    assert retry_after_s(ModelThrottled(3.0), 0.0) == 3.0


def test_openais_rate_limit_error_carries_the_pause() -> None:
    httpx = pytest.importorskip("httpx")
    openai = pytest.importorskip("openai")
    request = httpx.Request("POST", "http://model/v1/chat/completions")
    response = httpx.Response(429, headers={"Retry-After": "2"}, request=request)
    exc = openai.RateLimitError("Rate limit reached", response=response, body=None)
    assert retry_after_s(exc, 0.0) == 2.0
    asked = httpx.Request("POST", "http://model/v1/chat/completions", json={"model": "gpt-x"})
    response = httpx.Response(429, headers={"Retry-After": "2"}, request=asked)
    exc = openai.RateLimitError("Rate limit reached", response=response, body=None)
    assert model_of(exc) == "gpt-x"
    assert model_of(ModelThrottled(1.0, model="m2")) == "m2"
    assert model_of(RuntimeError("429")) is None
