"""A first `make run` with no secret set: a development secret, `python -m devstack send`, a quiet
console."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from testkit import payloads, signing
from tests.integration.devstack.running_up import (
    Up,
    devstack_send,
    running_up,
    up_env,
    wait_for,
)

pytestmark = pytest.mark.integration

#: what faust's box-drawn tables look like, in a plain terminal and in a capable one
TABLE = re.compile(r"\+-{5,}|lqqq|[┌┐└┘│─]")


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    tmp = tmp_path_factory.mktemp("first-run")
    with running_up(tmp, up_env(tmp)) as up:
        wait_for(lambda: "worker ready" in up.output(), 120, "the worker", up.log)
        yield up


def _post(up: Up, secret: str) -> int:
    body = payloads.dumps(payloads.agentmail_received(sender="first@example.com"))
    request = urllib.request.Request(
        f"{up.ingest_url}/webhooks/agentmail",
        data=body,
        headers=signing.svix_headers(body, secret=secret),
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _printed_secret(up: Up) -> str:
    [secret] = re.findall(r"ONCEONLY_AGENTMAIL_WEBHOOK_SECRET=(whsec_\S+)", up.output())
    return secret


def test_the_printed_development_secret_is_the_one_ingest_verifies_with(first_run: Up) -> None:
    assert _post(first_run, _printed_secret(first_run)) == 204
    assert _post(first_run, signing.SVIX_SECRET) == 401


def test_the_development_secret_is_kept_under_the_run_directory(first_run: Up) -> None:
    kept = (first_run.run_dir / "agentmail-dev-secret").read_text().strip()

    assert kept == _printed_secret(first_run)


def test_send_reports_one_reply_for_three_deliveries_and_a_newer_message(first_run: Up) -> None:
    sent = devstack_send(first_run)

    assert sent.returncode == 0, sent.stderr
    report = sent.stdout
    assert report.count("HTTP 204") == 4, report
    assert report.count("answered in the dry-run outbox") == 1, report
    assert report.count("answered by the reply to message B") == 1, report
    assert report.count("skipped as a duplicate of message A, delivery 1") == 2, report
    assert report.count("    reply: ") == 1, report
    assert report.count("[worker: skipped: duplicate]") == 2, report  # from its decision records


def test_the_console_shows_no_librdkafka_lines_and_no_faust_tables(first_run: Up) -> None:
    console = first_run.output()
    head = console[: console.index("webhook    POST")]

    assert "starting kafka at" in head  # the broker was not up when `up` looked...
    assert "waiting for the broker" not in console  # ...and its probe's refusals are no warning
    assert not [line for line in console.splitlines() if "|FAIL|" in line or line.startswith("%")]
    assert not TABLE.search(console)
    assert "tables recovered" in console
