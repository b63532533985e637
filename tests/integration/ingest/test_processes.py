"""ONCEONLY_INGEST_PROCESSES=2: two ingest processes on one port, under one parent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devstack.ports import free_port
from onceonly.foundation.settings import Settings
from onceonly.ingest.processes import ready_pids
from testkit import payloads, signing
from tests.conftest import consume_all

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]


def _get(url: str) -> dict[str, object]:
    # a new connection per request: the kernel picks the process per connection
    with urllib.request.urlopen(url, timeout=5) as answer:
        return dict(json.loads(answer.read()))


def _post(url: str, body: bytes) -> int:
    request = urllib.request.Request(url, data=body, headers=signing.svix_headers(body))
    try:
        with urllib.request.urlopen(request, timeout=15) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@pytest.fixture
def two(
    settings_factory: Callable[..., Settings],
    topics_factory: Callable[[Settings], Settings],
    tmp_path: Path,
) -> Iterator[tuple[subprocess.Popen[bytes], Settings, str]]:
    settings = topics_factory(settings_factory())
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONCEONLY_")}
    env |= {
        "ONCEONLY_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "ONCEONLY_DELIVERIES_TOPIC": settings.deliveries_topic,
        "ONCEONLY_INGEST_PORT": str(port),
        "ONCEONLY_INGEST_PROCESSES": "2",
        "ONCEONLY_RUN_DIR": str(tmp_path / "run"),
        "ONCEONLY_AGENTMAIL_WEBHOOK_SECRET": signing.SVIX_SECRET,
        "PYTHONUNBUFFERED": "1",
    }
    log = (tmp_path / "ingest.log").open("wb")
    parent = subprocess.Popen(
        [sys.executable, "-m", "onceonly", "ingest"], env=env, cwd=ROOT, stdout=log, stderr=log
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while (
        len(_children(parent.pid)) < 2
        or not (tmp_path / "run" / "ingest").is_dir()
        or len(ready_pids(tmp_path / "run" / "ingest") & _children(parent.pid)) < 2
    ):
        assert time.monotonic() < deadline, (tmp_path / "ingest.log").read_text()[-3000:]
        time.sleep(0.2)
    yield parent, settings, url
    if parent.poll() is None:
        parent.kill()
    for pid in _children(parent.pid):
        os.kill(pid, signal.SIGKILL)
    parent.wait(30)
    log.close()


def _children(pid: int) -> set[int]:
    try:
        found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except FileNotFoundError:
        return set()
    return {int(child) for child in found}


def _answers(url: str) -> bool:
    try:
        return _get(f"{url}/healthz")["status"] == "ok"
    except (OSError, ValueError):
        return False


def test_both_processes_answer_on_the_one_port(
    two: tuple[subprocess.Popen[bytes], Settings, str],
) -> None:
    parent, _, url = two

    answered = {_get(f"{url}/healthz")["process"] for _ in range(60)}

    assert answered == _children(parent.pid)


def test_every_accepted_delivery_is_in_the_topic_once_per_acceptance(
    two: tuple[subprocess.Popen[bytes], Settings, str],
) -> None:
    _, settings, url = two
    accepted: Counter[str] = Counter()
    for n in range(40):
        payload = payloads.agentmail_received(event_id=f"evt-{n % 30}")  # 10 sent twice
        if _post(f"{url}/webhooks/agentmail", payloads.dumps(payload)) == 204:
            accepted[payload["event_id"]] += 1

    stored = Counter(
        json.loads(m.value())["event_id"] for m in consume_all(settings, settings.deliveries_topic)
    )

    assert sum(accepted.values()) == 40
    assert stored == accepted


def test_metrics_count_the_deliveries_of_both_processes(
    two: tuple[subprocess.Popen[bytes], Settings, str],
) -> None:
    _, _, url = two
    for _ in range(20):
        _post(f"{url}/webhooks/agentmail", payloads.dumps(payloads.agentmail_received()))

    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as answer:
        text = answer.read().decode()

    assert 'onceonly_deliveries_accepted_total{provider="agentmail"} 20.0' in text


def test_a_child_that_dies_is_started_again(
    two: tuple[subprocess.Popen[bytes], Settings, str], tmp_path: Path
) -> None:
    parent, _, url = two
    victim = min(_children(parent.pid))
    os.kill(victim, signal.SIGKILL)

    deadline = time.monotonic() + 30
    while len(ready_pids(tmp_path / "run" / "ingest") & (_children(parent.pid) - {victim})) < 2:
        assert time.monotonic() < deadline, "the dead child was not replaced"
        time.sleep(0.2)
    assert _answers(url)


def test_ctrl_c_stops_the_parent_and_every_child(
    two: tuple[subprocess.Popen[bytes], Settings, str],
) -> None:
    parent, _, _ = two
    children = _children(parent.pid)

    parent.send_signal(signal.SIGINT)

    assert parent.wait(30) == 0
    assert not [pid for pid in children if Path(f"/proc/{pid}").exists()]
