"""Kafka's own operator tools (org.apache.kafka:kafka-tools, fetched with the broker's jars),
run from the broker's classpath: what a Kafka distribution has as ``kafka-consumer-groups.sh``
and ``kafka-console-consumer.sh``, without a distribution.

    python -m devstack.kafka_tools consumer-groups --bootstrap-server localhost:9092 --list
    python -m devstack.kafka_tools console-consumer --bootstrap-server localhost:9092 \\
        --topic replies --from-beginning --property print.key=true --timeout-ms 5000
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from devstack.jars import OPS_KAFKA_DIR, kafka_classpath
from devstack.jvm import find_java

#: ``kafka-consumer-groups.sh``: list, describe, reset the offsets of, delete groups.
CONSUMER_GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
#: ``kafka-console-consumer.sh``: print a topic's records (Kafka 4 moved it out of ``kafka.tools``).
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"

#: ``kafka-topics.sh``: create, list, describe topics (partitions, replicas, in-sync replicas).
TOPICS = "org.apache.kafka.tools.TopicCommand"

#: ``kafka-configs.sh``: describe and alter a topic's (or a broker's) configs.
CONFIGS = "kafka.admin.ConfigCommand"

#: the scripts' names, without ``kafka-`` and ``.sh``, for ``python -m devstack.kafka_tools``
TOOLS: Mapping[str, str] = {
    "consumer-groups": CONSUMER_GROUPS,
    "console-consumer": CONSOLE_CONSUMER,
    "topics": TOPICS,
    "configs": CONFIGS,
}

#: the broker's log4j2 config: WARN and above to stderr, everything to ``<logs_dir>/server.log``
_LOG4J2_CONFIG = OPS_KAFKA_DIR / "log4j2.properties"


def tool_command(
    main_class: str, args: Sequence[str], *, classpath: str, logs_dir: Path
) -> list[str]:
    """The ``java`` command line that runs ``main_class`` of Kafka's tools with ``args``."""
    return [
        find_java(),
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",  # a short-lived client: start fast rather than run fast
        f"-Dlog4j2.configurationFile={_LOG4J2_CONFIG}",
        f"-Donceonly.broker.logs.dir={logs_dir}",
        "-cp",
        classpath,
        main_class,
        *args,
    ]


def run_tool(
    main_class: str,
    args: Sequence[str],
    *,
    classpath: str,
    logs_dir: Path,
    timeout_s: float = 120.0,
) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's tools to its end; its stdout and stderr are captured, its exit
    status is the caller's to judge (as a shell script's would be)."""
    logs_dir.mkdir(parents=True, exist_ok=True)
    command = tool_command(main_class, args, classpath=classpath, logs_dir=logs_dir)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)


def main(argv: Sequence[str]) -> int:
    """``python -m devstack.kafka_tools <tool> <its arguments>``: the tool in the foreground,
    with the project's cached classpath (``$ONCEONLY_RUN_DIR/kafka.classpath``, by default
    ``.run/``), fetched first if need be."""
    run_dir = Path(os.environ.get("ONCEONLY_RUN_DIR") or ".run")
    if not argv or argv[0] not in TOOLS:
        print(f"usage: python -m devstack.kafka_tools {{{','.join(TOOLS)}}} ...", file=sys.stderr)
        return 2
    classpath = kafka_classpath(run_dir.resolve())
    logs_dir = run_dir.resolve() / "tools" / "logs"
    logs_dir.mkdir(parents=True, exist_ok=True)
    command = tool_command(TOOLS[argv[0]], argv[1:], classpath=classpath, logs_dir=logs_dir)
    return subprocess.run(command, check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
