"""wrk as the ingest benchmark's closed loop: its output read into figures, its Lua script.

What wrk does with the script is tested against wrk itself in
tests/integration/bench/test_wrk_script.py.
"""

from __future__ import annotations

import math

import pytest

from bench._load import Delivery
from bench._procs import BenchError
from bench._wrk import (
    WrkOutput,
    host_header,
    lua_script,
    lua_string,
    parse_output,
    sample_of,
)

# What wrk 4.1.0 (Debian) printed for a run, with the socket errors and non-2xx lines that
# it prints only when there are any.
OUTPUT = """\
onceonly-bench: wrk thread ready
Running 3s test @ http://127.0.0.1:36239/webhooks/agentmail
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    10.10ms    1.45ms   1.20s    87.80%
    Req/Sec     5.93k     2.44k    9.83k    70.00%
  Latency Distribution
     50%  417.00us
     75%    1.31ms
     90%    2.85ms
     99%    1.02s
  17741 requests in 3.00s, 1.16MB read
  Socket errors: connect 1, read 2, write 3, timeout 4
  Non-2xx or 3xx responses: 12
Requests/sec:   5893.64
Transfer/sec:      1.15MB
"""

CLEAN = """\
Running 1m test @ http://127.0.0.1:8000/webhooks/agentmail
  1 threads and 32 connections
  Latency Distribution
     50%    5.00ms
     75%    6.00ms
     90%    7.00ms
     99%   24.90ms
  142080 requests in 1.00m, 10.00MB read
Requests/sec:   2368.00
"""


def test_the_summary_gives_requests_and_duration() -> None:
    out = parse_output(OUTPUT)

    assert out.requests == 17741
    assert out.duration_s == pytest.approx(3.0)
    assert parse_output(CLEAN).duration_s == pytest.approx(60.0)


def test_the_latency_distribution_is_read_in_milliseconds_whatever_its_unit() -> None:
    out = parse_output(OUTPUT)

    assert out.latency_ms == pytest.approx({0.5: 0.417, 0.75: 1.31, 0.9: 2.85, 0.99: 1020.0})


def test_socket_errors_and_non_2xx_answers_are_counted() -> None:
    out = parse_output(OUTPUT)

    assert out.non_2xx == 12
    assert out.errors == {"connect": 1, "read": 2, "write": 3, "timeout": 4}


def test_a_clean_run_has_no_errors() -> None:
    out = parse_output(CLEAN)

    assert out.non_2xx == 0
    assert out.errors == {"connect": 0, "read": 0, "write": 0, "timeout": 0}


def test_output_without_a_summary_is_an_error_that_shows_it() -> None:
    with pytest.raises(BenchError, match="unable to connect"):
        parse_output("unable to connect to 127.0.0.1:9 Connection refused\n")


def test_the_sample_counts_2xx_as_delivered_and_the_rest_as_failed() -> None:
    sample = sample_of(parse_output(OUTPUT), pool_size=30_000)

    assert sample.ok == 17741 - 12
    assert sample.failed == 12 + 1 + 2 + 3 + 4
    assert sample.rate == pytest.approx((17741 - 12) / 3.0)
    assert "12 x not 2xx" in sample.failures()


def test_the_sample_s_percentiles_are_wrk_s() -> None:
    sample = sample_of(parse_output(CLEAN), pool_size=30_000)

    assert sample.percentile_ms(0.5) == pytest.approx(5.0)
    assert sample.percentile_ms(0.99) == pytest.approx(24.9)
    assert math.isnan(sample.percentile_ms(0.999))  # wrk does not print it


def test_the_pool_wrapped_when_warm_up_and_run_sent_more_than_it_holds() -> None:
    out = WrkOutput(1000, 1.0, 0, {}, {})

    assert not sample_of(out, pool_size=1500, sent_before=500).pool_wrapped
    assert sample_of(out, pool_size=1500, sent_before=501).pool_wrapped


def test_a_lua_string_escapes_quotes_backslashes_and_every_unprintable_byte() -> None:
    # three-digit escapes: the "1" after the NUL must stay a character of its own
    assert lua_string(b'a"b\\c\n\x001\xff') == '"a\\"b\\\\c\\010\\0001\\255"'
    assert lua_string(b"{'k': [1, 2]}") == "\"{'k': [1, 2]}\""


def test_the_host_header_is_the_url_s_host_and_port() -> None:
    assert host_header("http://127.0.0.1:8123/webhooks/agentmail") == "127.0.0.1:8123"
    assert host_header("http://[::1]:8123/x") == "[::1]:8123"
    assert host_header("http://example.com/x") == "example.com"


def test_the_script_holds_every_delivery_with_its_headers_and_the_host() -> None:
    pool = [
        Delivery(f'{{"event_id": "evt_{n}"}}'.encode(), {"svix-id": f"msg_{n}"}) for n in range(3)
    ]

    script = lua_script(pool, "http://127.0.0.1:8123/webhooks/agentmail")

    for n in range(3):
        entry = f'add("{{\\"event_id\\": \\"evt_{n}\\"}}", '
        entry += f'{{["Host"] = "127.0.0.1:8123", ["svix-id"] = "msg_{n}"}})'
        assert entry in script
    assert 'local path = "/webhooks/agentmail"' in script


def test_a_script_needs_a_delivery() -> None:
    with pytest.raises(BenchError):
        lua_script([], "http://127.0.0.1:8123/")
