"""A healthy idle worker logs nothing, however long it idles; a real stall is logged once.

faust's livelock check logged fifteen lines at ERROR, every 7 s, for each partition of the
reply ledger of a worker with nothing to do, from five minutes after its start on. Here
faust's timeouts (its own variables, read from the environment) and ours are 4 s, so a
worker idles past them within seconds.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from tests.integration.workers import Stack, WorkerProcess, model_env, until

pytestmark = pytest.mark.integration

#: faust's stream-inactivity and commit-livelock timeouts, and ours, all short
SHORT_TIMEOUTS = {
    "STREAM_PROCESSING_TIMEOUT": "4",
    "BROKER_COMMIT_LIVELOCK_SOFT_TIMEOUT": "4",
    "ONCEONLY_STALL_WARN_S": "4",
}
#: a line of the console log at WARNING or above (onceonly.foundation.logs), or a traceback
LOUD = re.compile(r"\[(warning|error|critical)\s*\]|Traceback")
READY = "worker ready"


def metric(worker: WorkerProcess, name: str) -> float:
    """One unlabelled metric of the worker's /metrics page (-1 while the page is down)."""
    match = re.search(rf"^{name} (\S+)$", worker.metrics(), re.MULTILINE)
    return float(match.group(1)) if match else -1.0


def loud_lines(worker: WorkerProcess) -> list[str]:
    """The worker's warnings, errors and tracebacks since it said it was ready."""
    after_ready = worker.log().split(READY, 1)[-1]
    return [line for line in after_ready.splitlines() if LOUD.search(line)]


async def test_an_idle_worker_past_every_inactivity_timeout_logs_no_warning_or_error(
    stack_factory: Callable[..., Stack],
) -> None:
    # the default reorder window, 2 s: the tick timer's interval is 0.5 s (mode warns of a
    # turn of the event loop longer than the interval, as a loaded machine may take)
    stack = stack_factory(partitions=8, reorder_window_ms=2000)
    worker = stack.worker(**SHORT_TIMEOUTS)
    await until(stack, lambda: READY in worker.log(), "the worker ready", timeout_s=120)
    await stack.deliver(stack.seed("<idle@example.com>", "thr-idle"))
    await stack.until_sent(1)  # the reply ledger, the dedupe and holds tables written
    rounds = metric(worker, "onceonly_stall_checks_total")

    def idled_past_the_timeouts() -> bool:
        loud = loud_lines(worker)
        assert not loud, "the idle worker logged:\n" + "\n".join(loud)
        # four rounds of the check (7 s apart) since the reply: well past the 4 s
        return metric(worker, "onceonly_stall_checks_total") >= rounds + 4

    await until(stack, idled_past_the_timeouts, "four rounds of the stall check", timeout_s=60)

    assert loud_lines(worker) == []
    assert metric(worker, "onceonly_stalled_partitions") == 0


async def test_a_partition_whose_record_does_not_finish_is_reported_once_then_its_end(
    stack_factory: Callable[..., Stack],
) -> None:
    # no reorder window: a record stays unfinished until its reply is written and sent (with
    # one, it is finished once held, and the writer works for a tick that is finished too)
    stack = stack_factory(partitions=4, reorder_window_ms=0)
    worker = stack.worker(**SHORT_TIMEOUTS, **model_env(stack))
    await until(stack, lambda: READY in worker.log(), "the worker ready", timeout_s=120)

    # the writer takes 40 s over one reply: its partition's work does not move meanwhile
    await stack.deliver(stack.seed("<slow@example.com>", "thr-slow", text="SLOW=40"))
    await until(stack, lambda: "partition stalled" in worker.log(), "the stall", timeout_s=30)
    assert metric(worker, "onceonly_stalled_partitions") == 1
    rounds = metric(worker, "onceonly_stall_checks_total")
    await until(
        stack,
        lambda: metric(worker, "onceonly_stall_checks_total") >= rounds + 2,
        "two more rounds of the check",
        timeout_s=30,
    )
    assert "partition moving again" not in worker.log()  # still stalled: said once only
    assert len(stack.mail.outbox) == 0

    await stack.until_sent(1, timeout_s=60)
    await until(stack, lambda: "partition moving again" in worker.log(), "its end", timeout_s=30)

    [stalled] = [line for line in loud_lines(worker) if "partition stalled" in line]
    assert f"topic={stack.settings.deliveries_topic}" in stalled
    assert "waiting=" in stalled and "ONCEONLY_STALL_WARN_S" in stalled
    assert loud_lines(worker) == [stalled]  # nothing else, and never faust's check
    assert metric(worker, "onceonly_stalled_partitions") == 0
