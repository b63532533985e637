"""No AdminClient group request in onceonly: each has aborted or crashed a process here.

- ``describe_consumer_groups``: a worker starting on a three-node cluster aborted in
  librdkafka (``rd_kafka_enq_once_del_source_return: Assertion eonce->refcnt > 0``;
  librdkafka #4605), twice on this machine (chaos-ci and make test, 2026-12-04).
- ``list_consumer_group_offsets``: crashes on a group the broker has not seen
  (confluent-kafka-python #1982).

Both are asked with a Consumer carrying the group id instead (Admin.group_coordinator_ready,
consumer_lag).
"""

from __future__ import annotations

import ast
from pathlib import Path

import onceonly

FORBIDDEN = frozenset({"describe_consumer_groups", "list_consumer_group_offsets"})


def calls_in(source: str) -> list[str]:
    """The forbidden methods called in ``source``, in order."""
    return [
        node.func.attr
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in FORBIDDEN
    ]


def test_the_check_finds_such_a_call() -> None:
    found = calls_in("futures = client.describe_consumer_groups(['g'], request_timeout=5)")
    assert found == ["describe_consumer_groups"]


def test_onceonly_makes_no_admin_group_request() -> None:
    root = Path(onceonly.__file__).parent
    found = {
        str(path.relative_to(root)): calls
        for path in sorted(root.rglob("*.py"))
        if (calls := calls_in(path.read_text(encoding="utf-8")))
    }
    assert found == {}
