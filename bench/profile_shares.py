"""The worker's CPU by step, from a py-spy raw profile: ``python -m bench.profile_shares RAW``.
Each sample goes to the deepest frame a rule names: onceonly's (:data:`ONCEONLY_RULES`),
else a library's (:data:`LIBRARY_RULES`), else :data:`GENERIC_RULES`, else "other"."""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import click

#: (step, path prefix, function-name substring or "") for onceonly's frames; the deepest
#: frame matching any rule decides. Generic helpers (runtime/tables.py, the CLI) are not
#: named, so their work goes to the step that called them.
ONCEONLY_RULES: tuple[tuple[str, str, str], ...] = (
    ("send through the mail SDK", "onceonly/processors/mail/", ""),
    ("fence check", "onceonly/processors/fence.py", ""),
    ("fence check", "onceonly/processors/runtime/consumer.py", "_rounds_for"),
    ("fence check", "onceonly/processors/runtime/consumer.py", "_commit_as_member"),
    ("fence check", "onceonly/processors/runtime/consumer.py", "confirm_owner"),
    ("ledger write + ack", "onceonly/processors/reply/ledger.py", ""),
    ("ledger write + ack", "onceonly/schemas/ledger.py", ""),
    ("dedupe write", "onceonly/processors/dedupe/", ""),
    ("reorder hold", "onceonly/processors/reorder/", ""),
    ("writer scheduling", "onceonly/processors/writer/", ""),
    ("writer scheduling", "onceonly/processors/lanes.py", ""),
    ("writer scheduling", "onceonly/processors/router.py", ""),
    ("writer scheduling", "onceonly/processors/flow/", ""),
    ("reply bookkeeping (compose, arbitration)", "onceonly/processors/reply/", ""),
    ("reply bookkeeping (compose, arbitration)", "onceonly/processors/conversation.py", ""),
    ("reply bookkeeping (compose, arbitration)", "onceonly/processors/approval/", ""),
    ("consume + decode", "onceonly/processors/runtime/worker.py", "process"),
    ("consume + decode", "onceonly/schemas/", ""),
    ("consume + decode", "onceonly/processors/messages.py", ""),
    ("consume + decode", "onceonly/processors/records.py", ""),
    ("commit", "onceonly/processors/offsets.py", ""),
    ("commit", "onceonly/processors/runtime/progress.py", ""),
    ("commit", "onceonly/processors/runtime/worker.py", "confirm"),
    ("fixed: metrics, tracing, lag", "onceonly/processors/metrics.py", ""),
    ("fixed: metrics, tracing, lag", "onceonly/foundation/kafka/_lag.py", ""),
    ("fixed: metrics, tracing, lag", "onceonly/processors/stalls.py", ""),
    ("fixed: metrics, tracing, lag", "onceonly/processors/health.py", ""),
)

#: The same for library frames, used when no onceonly rule matched.
LIBRARY_RULES: tuple[tuple[str, str, str], ...] = (
    ("send through the mail SDK", "agentmail/", ""),
    ("send through the mail SDK", "httpx/", ""),
    ("send through the mail SDK", "aiohttp/", ""),
    ("send through the mail SDK", "ssl.py", ""),
    ("commit", "aiokafka/consumer/group_coordinator.py", "ommit"),
    ("commit", "faust/transport/consumer.py", "ommit"),
    ("commit", "faust/transport/drivers/aiokafka.py", "ommit"),
    ("consume + decode", "aiokafka/consumer/fetcher.py", ""),
    ("consume + decode", "aiokafka/consumer/consumer.py", ""),
    ("consume + decode", "aiokafka/record/", ""),
    ("consume + decode", "faust/transport/consumer.py", ""),
    ("consume + decode", "faust/transport/conductor.py", ""),
    ("consume + decode", "faust/streams.py", ""),
    ("consume + decode", "faust/channels.py", ""),
    ("consume + decode", "faust/agents/", ""),
    ("Kafka produce (ledger, dedupe, holds changelogs)", "aiokafka/producer/", ""),
    ("Kafka produce (ledger, dedupe, holds changelogs)", "faust/transport/producer.py", ""),
    ("Kafka produce (ledger, dedupe, holds changelogs)", "faust/tables/", ""),
    ("Kafka produce (ledger, dedupe, holds changelogs)", "faust/stores/", ""),
    ("fixed: metrics, tracing, lag", "faust/sensors/", ""),
    ("fixed: metrics, tracing, lag", "prometheus_client/", ""),
    ("fixed: metrics, tracing, lag", "opentelemetry/", ""),
    ("fixed: logs", "structlog/", ""),
    ("fixed: logs", "logging/", ""),
    ("consumer thread's loop (select, wake-ups)", "mode/threads.py", "ServiceThread._start_thread"),
)

#: Last: frames that say only which machinery ran (deepest wins here too).
GENERIC_RULES: tuple[tuple[str, str, str], ...] = (
    ("fixed: heartbeats, group", "aiokafka/consumer/group_coordinator.py", ""),
    ("Kafka client, other (connections, protocol)", "aiokafka/", ""),
    ("event loop (select, callbacks, timers)", "asyncio/", ""),
    ("event loop (select, callbacks, timers)", "selectors.py", ""),
    ("fixed: faust and mode services, timers", "mode/", ""),
    ("fixed: faust and mode services, timers", "faust/", ""),
)

#: Leaf frames that block in the kernel (epoll_wait): py-spy's ``--nonblocking`` samples
#: cannot always tell them idle, but they are waits, not CPU (the consumer thread's loop
#: showed 11-15 % of the samples in ``select`` and 7 % of the worker's CPU in /proc).
#: Counted apart and left out of the shares.
IDLE_LEAVES = (("EpollSelector.select", "selectors.py"),)
IDLE = "idle: waiting in epoll (not CPU, left out)"

FRAME = re.compile(r"^(?P<function>.*) \((?P<path>[^()]*?):\d+\)$")


def parse(lines: Iterable[str]) -> Iterable[tuple[list[tuple[str, str]], int]]:
    """(frames as (function, path), root first; samples) per collapsed-stack line."""
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = []
        for text in stack.split(";"):
            match = FRAME.match(text)
            frames.append((match["function"], match["path"]) if match else (text, ""))
        yield frames, int(count)


def _matches(frame: tuple[str, str], rule: tuple[str, str, str]) -> bool:
    function, path = frame
    _, prefix, name = rule
    return (path.startswith(prefix) or f"/{prefix}" in path) and name in function


def step_of(frames: list[tuple[str, str]]) -> str:
    """The step a sample's stack (root first) belongs to, or :data:`IDLE`."""
    function, path = frames[-1]
    if any(function == f and path.endswith(p) for f, p in IDLE_LEAVES):
        return IDLE
    for rules in (ONCEONLY_RULES, LIBRARY_RULES, GENERIC_RULES):
        for frame in reversed(frames):
            for rule in rules:
                if _matches(frame, rule):
                    return rule[0]
    return "other"


def shares(lines: Iterable[str]) -> tuple[Counter[str], Counter[str]]:
    """(samples per step, self samples per leaf frame)."""
    steps: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    for frames, count in parse(lines):
        steps[step_of(frames)] += count
        function, path = frames[-1]
        leaves[f"{function} ({path})"] += count
    return steps, leaves


def table(steps: Counter[str], ms_per_reply: float | None) -> list[str]:
    """Markdown rows: each step's samples, share and (given the window's CPU ms per reply)
    its ms per reply; the idle samples last, outside the shares."""
    idle = steps.pop(IDLE, 0)
    total = sum(steps.values()) or 1
    head = "| step | samples | share of worker CPU |"
    rule = "| --- | ---: | ---: |"
    if ms_per_reply is not None:
        head, rule = head + " CPU ms per reply |", rule + " ---: |"
    out = [head, rule]
    for step, count in steps.most_common():
        row = f"| {step} | {count:,} | {100 * count / total:.1f} % |"
        if ms_per_reply is not None:
            row += f" {ms_per_reply * count / total:.2f} |"
        out.append(row)
    out.append(f"| all | {total:,} | 100 % |" + (f" {ms_per_reply:.2f} |" if ms_per_reply else ""))
    out.append(
        f"| {IDLE} | {idle:,} | | |" if ms_per_reply is not None else f"| {IDLE} | {idle:,} | |"
    )
    return out


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("raw", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "summary", type=click.Path(exists=True, path_type=Path), default=None)
@click.option("--top", type=click.IntRange(0, 1000), default=0, help="Also the top self frames.")
def main(raw: Path, summary: Path | None, top: int) -> None:
    """Print the per-step table of a py-spy raw profile of the worker."""
    data = raw.read_bytes()
    text = (gzip.decompress(data) if raw.suffix == ".gz" else data).decode("utf-8")
    steps, leaves = shares(text.splitlines())
    ms = None
    if summary is not None:
        found = json.loads(summary.read_text(encoding="utf-8"))
        ms = float(found["ms_per_reply"])
    click.echo("\n".join(table(steps, ms)))
    total = sum(leaves.values()) or 1
    for frame, count in leaves.most_common(top):
        click.echo(f"{100 * count / total:5.1f} %  {frame}")


if __name__ == "__main__":
    main()
