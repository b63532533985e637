"""bench/openloop, the ingest benchmark's open-loop generator (Go), against a local server.

No broker: the recording server of this folder's conftest. Go is on the machine, or the
benchmark installs Debian's golang-go (bench._openloop.build_generator).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from bench._load import Delivery, sign_pool
from bench._openloop import GO_ENV, GO_PATHS, SOURCE, build_generator, go_command, open_loop
from tests.integration.bench.conftest import ROUTE, NamesLoad, Recorder

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@pytest.fixture(scope="module")
def go() -> str:
    go_found = shutil.which("go") or any(os.access(p, os.X_OK) for p in GO_PATHS)
    if not go_found and os.geteuid() != 0:
        pytest.skip("Go is not installed, and installing it needs root")
    return go_command()


@pytest.fixture(scope="module")
def generator(go: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_generator(tmp_path_factory.mktemp("openloop"))


def test_the_wire_client_s_own_go_tests_pass(go: str) -> None:
    # chunked answers, Connection: close among tokens, HTTP/1.0, a non-HTTP answer, and
    # jobs past the run's deadline (bench/openloop/wire_test.go)
    done = subprocess.run(
        [go, "test", "./..."], cwd=SOURCE, env={**os.environ, **GO_ENV},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def pool() -> list[Delivery]:
    return sign_pool(SECRET, 60)


def _warm_url(recorder: Recorder) -> str:
    return recorder.url.removesuffix(ROUTE) + "/healthz"


async def test_it_sends_the_pool_in_turn_each_as_signed_and_starts_it_again(
    generator: Path, pool: list[Delivery], recorder: Recorder
) -> None:
    sample = await open_loop(
        generator, recorder.url, pool, rate=100, duration_s=1,
        concurrency=1, warm_url=_warm_url(recorder),
    )  # fmt: skip

    assert len(recorder.received) == 100
    for n, (body, headers) in enumerate(recorder.received):
        sent = pool[n % len(pool)]
        assert body == sent.body
        assert {k: headers[k] for k in sent.headers} == sent.headers
    assert sample.ok == 100 and sample.failed == 0
    assert sample.pool_wrapped


async def test_every_connection_is_opened_before_the_clock_starts(
    generator: Path, pool: list[Delivery], recorder: Recorder
) -> None:
    await open_loop(
        generator, recorder.url, pool, rate=50, duration_s=1,
        concurrency=4, warm_url=_warm_url(recorder),
    )  # fmt: skip

    assert len(recorder.get_peers) == 4
    assert not any(recorder.posted_before_get)
    # every delivery went over one of the four warmed connections: none was dialled later
    assert set(recorder.post_peers) <= set(recorder.get_peers)
    assert len(set(recorder.get_peers)) == 4


async def test_a_stall_is_charged_to_every_request_queued_behind_it(
    generator: Path, pool: list[Delivery], recorder: Recorder
) -> None:
    recorder.stall_s = 0.3  # the first answer is late; one connection, so the rest queue

    sample = await open_loop(
        generator, recorder.url, pool, rate=100, duration_s=1,
        concurrency=1, warm_url=_warm_url(recorder),
    )  # fmt: skip

    # 100/s for the 0.3 s stall: about 30 requests were due meanwhile and sent late, for
    # want of a free connection; the generator itself queued every one on time
    assert sum(lag > 0.1 for lag in sample.send_lag) >= 20
    assert max(sample.dispatch_lag) < 0.1
    assert sum(latency > 0.1 for latency in sample.latencies) >= 20
    assert sample.percentile_ms(0.5) < sample.percentile_ms(0.99)


async def test_answers_other_than_204_are_counted_by_status_without_a_latency(
    generator: Path, pool: list[Delivery], recorder: Recorder
) -> None:
    recorder.refuse_every = 4

    sample = await open_loop(
        generator, recorder.url, pool, rate=100, duration_s=1,
        concurrency=2, warm_url=_warm_url(recorder),
    )  # fmt: skip

    assert sample.statuses == {"204": 75, "503": 25}
    assert len(sample.latencies) == 75
    assert len(sample.send_lag) == 100


async def test_the_cpu_window_opens_with_the_clock_and_names_the_generator_as_the_load(
    generator: Path, pool: list[Delivery], recorder: Recorder
) -> None:
    window = NamesLoad({"load": None})

    await open_loop(
        generator, recorder.url, pool, rate=200, duration_s=1,
        concurrency=2, warm_url=_warm_url(recorder), window=window,
    )  # fmt: skip

    assert window.load_command == "openloop"
    assert window.percent["load"] > 0
