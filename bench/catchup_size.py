"""Catch-up at size (``python -m bench.catchup_size``): an inbox lost ``--messages`` messages;
catch-up's own work timed beside a bare listing of the same pages, and checked: every
unanswered message on the deliveries topic exactly once. Target (issue 45): 10,000 in 60 s."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from pydantic import SecretStr

from bench._options import Opt, Values
from bench._procs import Broker
from bench._runner import Scenario, command

if TYPE_CHECKING:
    from collections.abc import Callable

    from onceonly.foundation.settings import Settings

INBOX = "support@agentmail.to"
T = TypeVar("T")


async def _list_only(settings: Settings, since: datetime) -> int:
    from onceonly.operations import catchup

    source = catchup.source_for(settings, INBOX, None)
    count = 0
    try:
        async for _ in source.provider.sender.messages_since(INBOX, since):
            count += 1
    finally:
        await source.provider.sender.aclose()
    return count


def _timed(fn: Callable[[], T]) -> tuple[float, T]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def collect(opts: Values, broker: Broker, _work: Path) -> bool:
    from bench._catchup_seed import answer, message_id, queued, seed_inbox
    from bench._procs import create_topics, topic_settings
    from onceonly.foundation.kafka import Connection
    from onceonly.operations import catchup
    from testkit.fakes.agentmail_server import FakeAgentMail

    messages, answered, partitions = opts.messages, opts.answered, opts.partitions
    mail = FakeAgentMail()
    mail.start_in_thread()
    topics = create_topics(broker.bootstrap, partitions, f"catchup-{int(time.time())}")
    settings = topic_settings(
        broker.bootstrap,
        partitions,
        topics,
        agentmail_api_key=SecretStr("bench"),
        agentmail_base_url=mail.base_url,
    )
    first = seed_inbox(mail, INBOX, messages)
    asyncio.run(answer(settings, INBOX, range(answered)))
    since = datetime.fromtimestamp(first - 1, UTC)  # the SDK sends whole seconds

    list_before, listed = _timed(lambda: asyncio.run(_list_only(settings, since)))

    phases: dict[str, float] = {}

    def work() -> catchup.Summary:
        connection = Connection.from_settings(settings)
        read_s, known = _timed(lambda: catchup.read_answered(connection, settings.ledger_topic))
        phases["ledger read once"] = read_s
        source = catchup.source_for(settings, INBOX, None)
        return asyncio.run(catchup.feed_unanswered(settings, source, since, known))

    took, summary = _timed(work)
    list_after, _ = _timed(lambda: asyncio.run(_list_only(settings, since)))
    on_topic = queued(settings)
    mail.stop_in_thread()

    expected = {message_id(n) for n in range(answered, messages)}
    ok = set(on_topic) == expected and set(on_topic.values()) == {1}
    listing = min(list_before, list_after)
    print(f"messages lost: {messages} in one inbox ({answered} already answered); listed {listed}")
    print(f"listing alone: {list_before:.2f} s before, {list_after:.2f} s after the catch-up")
    print(
        f"catch-up's own work: {took:.2f} s, {messages / took:,.0f} messages/s "
        f"(fed {len(summary.fed)}, skipped {summary.skipped_answered} answered); "
        f"{took / listing:.2f} x the listing alone"
    )
    print("of it: " + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items()))
    print(f"queued exactly once, none answered: {'yes' if ok else 'NO'}")
    print(f"target (issue 45): at most 60 s: {'met' if took <= 60 else 'NOT met'}")
    return ok


OPTIONS = (
    Opt("--messages", None, 10_000, "Messages lost."),
    Opt("--answered", None, 100, "Of them, already answered."),
    Opt("--partitions", None, 8),
)
main = command(
    Scenario("catchup", "", OPTIONS, Values, collect, failed=lambda ok: not ok),
    "Catch-up's own work at size, beside a bare listing of the same pages.",
)

if __name__ == "__main__":
    main()
