"""``make compose-test``: docker-compose.yml run for real, with podman-compose.

    python -m devstack.compose_test [--no-cache] [--messages 200] [--report-dir compose/results]

Builds the images here (devstack.compose_images), brings the stack up in the order of its
``depends_on`` conditions and waits for every health check (Grafana is left out: it
cannot be had here), posts a signed sample with ``python -m devstack send --url`` and checks the
reply in the dry-run outbox of the workers' volume, scales the workers to three and
shows the deliveries partitions spread over them (Kafka's ``kafka-consumer-groups``),
kills one worker container with SIGKILL in the middle of a load and counts the replies
per message, then ``down -v``. The report (figures and log) goes to the report folder.
"""

from __future__ import annotations

import argparse
import base64
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from devstack import compose_images as images
from devstack import compose_load
from devstack.compose_report import write_report
from devstack.compose_stack import (
    Stack,
    StackError,
    group_table,
    parse_group_describe,
    partitions_by_host,
    replies_per_message,
    reply_verdict,
)
from devstack.jars import kafka_classpath
from devstack.kafka_tools import CONSUMER_GROUPS, run_tool
from onceonly.foundation.settings import DEFAULT_TOPICS

ROOT = Path(__file__).resolve().parent.parent
PROJECT = "onceonly-compose-test"
GROUP = "onceonly"  #: ONCEONLY_APP_ID's default: the workers' consumer group
PARTITIONS = 8
INGEST_URL = "http://127.0.0.1:8000"
HOST_BOOTSTRAP = "localhost:9094"


class Log:
    """Lines with their time since the start, echoed and kept for the report."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.lines: list[str] = []

    def __call__(self, text: str) -> None:
        for line in text.splitlines() or [""]:
            stamped = f"[{time.monotonic() - self.started:7.1f} s] {line}"
            print(stamped, flush=True)
            self.lines.append(stamped)


def stack_variables(secret: str) -> dict[str, str]:
    """What the compose file reads from the environment for this run: the images built
    here, a fresh AgentMail webhook secret, and a throwaway Grafana password (compose
    refuses every command without one; Grafana itself is not started)."""
    return {
        "ONCEONLY_IMAGE": images.ONCEONLY,
        "ONCEONLY_BASE_IMAGE": images.PYTHON,
        "KAFKA_IMAGE": images.kafka_image(),
        "PROMETHEUS_IMAGE": images.PROMETHEUS,
        "ONCEONLY_PARTITIONS": str(PARTITIONS),
        "ONCEONLY_AGENTMAIL_WEBHOOK_SECRET": secret,
        "GRAFANA_ADMIN_PASSWORD": secrets.token_urlsafe(16),
        "ONCEONLY_WORKERS": "1",
    }


def describe_group(run_dir: Path) -> str:
    result = run_tool(
        CONSUMER_GROUPS,
        ["--bootstrap-server", HOST_BOOTSTRAP, "--describe", "--group", GROUP],
        classpath=kafka_classpath(run_dir),
        logs_dir=run_dir / "tools" / "logs",
    )
    return result.stdout + result.stderr


def wait_spread(stack: Stack, run_dir: Path, workers: int, log: Log) -> tuple[str, float]:
    """Wait until ``workers`` members hold every deliveries partition; (the table, seconds)."""
    started = time.monotonic()
    topic = DEFAULT_TOPICS["deliveries"]
    text = ""
    while time.monotonic() - started < 180:
        text = describe_group(run_dir)
        spread = partitions_by_host(parse_group_describe(text, topic))
        if "-" not in spread and len(spread) == workers and sum(map(len, spread.values())) == 8:
            return text, time.monotonic() - started
        time.sleep(3.0)
    raise StackError(f"the partitions of {topic} never spread over {workers} workers:\n{text}")


def onceonly_send(secret: str, log: Log, *, bootstrap: str = HOST_BOOTSTRAP, count: int = 3) -> str:
    """``python -m devstack send --url`` from this host to the compose ingest (the ledger read on
    Kafka's host listener)."""
    env = {
        **os.environ,
        "ONCEONLY_AGENTMAIL_WEBHOOK_SECRET": secret,
        "ONCEONLY_KAFKA_BOOTSTRAP": bootstrap,
        "ONCEONLY_RUN_DIR": str(ROOT / ".run" / "compose" / "send"),
    }
    command = [sys.executable, "-m", "devstack", "send", "--url", INGEST_URL]
    command += ["--count", str(count), "--wait", "60"]
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    out = (result.stdout + result.stderr).strip()
    log(f"$ python -m devstack send --url {INGEST_URL} --count {count}\n{out}")
    if result.returncode != 0:
        raise StackError(f"python -m devstack send failed (exit {result.returncode})")
    return out


def wait_replies(
    stack: Stack, expected: Sequence[str], timeout_s: float
) -> tuple[dict[str, list[str]], float]:
    """Poll the outbox until every expected message has a reply (or time is up); the
    replies, read again 10 s later (a late double would come from a rebalance still under
    way), and the seconds until every message had one."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        replies = replies_per_message(stack.outbox_lines())
        if all(replies.get(m) for m in expected):
            break
        time.sleep(1.0)
    answered_s = time.monotonic() - started
    time.sleep(10.0)
    return replies_per_message(stack.outbox_lines()), answered_s


def topics_then_services(stack: Stack, log: Log) -> None:
    """On a healthy Kafka: the topics container run to its end (StackError if it failed),
    then ingest and the worker, each waited for by its health check."""
    stack.up("topics")
    status = stack.wait_exit(stack.container("topics"))
    log(f"topics exited {status}:\n{stack.logs(stack.container('topics'))}")
    if status != 0:
        raise StackError(f"the topics container exited {status}")
    stack.up("ingest", "worker")
    for name in (stack.container("ingest"), stack.container("worker")):
        log(f"{name} healthy after {stack.wait_healthy(name):.1f} s{failed_checks(stack, name)}")


def failed_checks(stack: Stack, name: str) -> str:
    """``name``'s failed health checks before it passed, for the log: why a start was slow."""
    if name not in stack.failed_checks:
        return ""
    count, last = stack.failed_checks[name]
    return f" ({count} failed check(s) before, the last: {last or '-'})"


def bring_up(stack: Stack, figures: dict[str, object], log: Log) -> None:
    """Every service but Grafana, in the order of the file's depends_on conditions, each
    waited for by its health check (topics: to its end)."""
    kafka = stack.container("kafka")
    t0 = time.monotonic()
    stack.up("kafka")
    figures["kafka healthy s"] = stack.wait_healthy(kafka)
    log(f"kafka healthy after {figures['kafka healthy s']:.1f} s")
    topics_then_services(stack, log)
    stack.up("prometheus")
    log(f"prometheus healthy after {stack.wait_healthy(stack.container('prometheus')):.1f} s")
    figures["time to healthy s"] = time.monotonic() - t0
    log(f"every service healthy {figures['time to healthy s']:.1f} s after the first `up`")


def first_reply(stack: Stack, secret: str, figures: dict[str, object], log: Log) -> None:
    figures["send"] = onceonly_send(secret, log)
    outbox = stack.outbox_lines()
    first = replies_per_message(outbox)
    log(f"dry-run outbox after python -m devstack send: {len(outbox)} line(s): {first}")
    if not outbox or any(len(keys) != 1 for keys in first.values()):
        raise StackError(f"expected one reply per message in the outbox, found {first}")
    figures["first replies"] = len(outbox)


def scale_to_three(
    stack: Stack, run_dir: Path, figures: dict[str, object], log: Log
) -> dict[str, list[int]]:
    """Three workers; the deliveries partitions each holds, by container name."""
    log("scaling the workers to 3 (ONCEONLY_WORKERS=3: podman-compose reads deploy.replicas)")
    stack.variables["ONCEONLY_WORKERS"] = "3"
    stack.up("worker")
    workers = [stack.container("worker", n) for n in (1, 2, 3)]
    for name in workers[1:]:
        log(f"{name} healthy after {stack.wait_healthy(name):.1f} s")
    table, spread_s = wait_spread(stack, run_dir, 3, log)
    names = {stack.address(name): name for name in workers}
    spread = partitions_by_host(parse_group_describe(table, DEFAULT_TOPICS["deliveries"]))
    figures["spread"] = {names.get(host, host): parts for host, parts in spread.items()}
    figures["group table"] = group_table(table, DEFAULT_TOPICS["deliveries"])
    log(f"partitions spread over 3 workers after {spread_s:.1f} s: {figures['spread']}")
    log(str(figures["group table"]))
    return {name: spread.get(stack.address(name), []) for name in workers}


def kill_under_load(
    stack: Stack,
    secret: str,
    messages: int,
    held: dict[str, list[int]],
    figures: dict[str, object],
    log: Log,
) -> None:
    """``messages`` messages; the worker holding the most partitions SIGKILLed halfway;
    then one reply (one idempotency key) per message, or a StackError."""
    batch = compose_load.load(secret, messages)
    half = messages // 2
    victim = max(held, key=lambda name: len(held[name]))
    statuses = compose_load.post(INGEST_URL, batch[:half])
    log(f"posted {half} messages; SIGKILL {victim}'s process (it held partitions {held[victim]})")
    stack.crash(victim)
    statuses += compose_load.post(INGEST_URL, batch[half:])
    log(f"posted {messages - half} more; ingest answers {sorted(set(statuses))}")
    expected = [d.message_id for d in batch]
    replies, answered_s = wait_replies(stack, expected, timeout_s=240)
    verdict = reply_verdict(expected, replies)
    figures["load"] = {
        "messages": messages,
        "accepted (2xx)": sum(1 for s in statuses if 200 <= s < 300),
        "answered": sum(1 for m in expected if replies.get(m)),
        "unanswered": len(verdict.unanswered),
        "answered twice (two keys)": len(verdict.answered_twice),
        "sent again with the same key": len(verdict.resent_same_key),
        "every message answered after s": round(answered_s, 1),
        "killed": victim,
        "its state after": stack.state(victim),
        "its restarts": stack.restarts(victim),
    }
    log(f"after the kill: {figures['load']}")
    if verdict.resent_same_key:
        resent = {m: replies[m][0] for m in verdict.resent_same_key}
        figures["resent"] = resent
        log(f"sent again with the same idempotency key: {sorted(resent)}")
    if verdict.unanswered or verdict.answered_twice:
        raise StackError(
            f"not one reply per message: unanswered {verdict.unanswered[:10]}, answered "
            f"twice {[(m, replies[m]) for m in verdict.answered_twice[:10]]}"
        )


def scenario(
    stack: Stack, run_dir: Path, secret: str, messages: int, log: Log
) -> dict[str, object]:
    """The steps in order; what each measured, with ``error`` set by the one that failed."""
    figures: dict[str, object] = {}
    try:
        bring_up(stack, figures, log)
        first_reply(stack, secret, figures, log)
        held = scale_to_three(stack, run_dir, figures, log)
        kill_under_load(stack, secret, messages, held, figures, log)
    except (StackError, subprocess.SubprocessError, OSError) as exc:
        figures["error"] = str(exc)
        log(f"FAILED: {exc}")
    return figures


def start(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None
) -> tuple[argparse.Namespace, Path, Log]:
    """A compose test's start: its options with --report-dir and --run-dir, the run
    directory, its log, and a host checked for what the images need."""
    parser.add_argument("--report-dir", type=Path, default=ROOT / "compose" / "results")
    parser.add_argument("--run-dir", type=Path, default=ROOT / ".run")
    args = parser.parse_args(argv)
    log = Log()
    images.ensure_host(log)
    return args, args.run_dir.resolve(), log


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack.compose_test")
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="remove the images (and the debootstrap tarball) first",
    )
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument(
        "--images-only",
        action="store_true",
        help="build (or find cached) the images, then stop: CI builds them beside make test",
    )
    args, run_dir, log = start(parser, argv)
    if args.no_cache:
        log("removing the images and the debootstrap tarball: a build from nothing")
        images.remove_images(images.all_images())
        for tarball in (run_dir / "compose").glob("debian-*.tar"):
            tarball.unlink()
    build_started = time.monotonic()
    debootstrap_s, built = images.build_all(run_dir, log)
    build_s = time.monotonic() - build_started
    if args.images_only:
        log(f"images in {build_s:.0f} s: {', '.join(b.image for b in built)}")
        return 0
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    stack = Stack(PROJECT, stack_variables(secret))
    stack.down()  # a previous run's leftovers, if any
    try:
        figures = scenario(stack, run_dir, secret, args.messages, log)
    finally:
        stack.down()
        log("down -v: no container, volume or network of the project left")
    error = figures.get("error")
    figures["total s"] = round(time.monotonic() - log.started)

    path = write_report(
        args.report_dir,
        no_cache=args.no_cache,
        debootstrap_s=debootstrap_s,
        build_s=build_s,
        built=built,
        figures=figures,
        error=str(error) if error else None,
        log_lines=log.lines,
    )
    log(f"report: {path}")
    return 1 if error else 0


if __name__ == "__main__":
    sys.exit(main())
