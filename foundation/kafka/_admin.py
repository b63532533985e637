"""Topic administration and broker checks over confluent-kafka's AdminClient."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from foundation.kafka._config import client_config
from foundation.kafka._errors import adapter_error
from foundation.kafka.exceptions import BrokerUnavailable, KafkaAdapterError, TopicMismatch


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """A topic onceonly needs. ``config`` holds the settings that must match exactly."""

    name: str
    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)
    #: settings applied on creation only (retention, record size), not checked later
    create_only: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TopicStatus:
    name: str
    created: bool
    partitions: int


class Admin:
    """The operations onceonly needs from a broker, with errors mapped to ours."""

    def __init__(self, bootstrap: str, *, timeout_s: float = 10.0, **extra: Any) -> None:
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self._client = AdminClient(client_config(bootstrap, **extra))

    def topic_partitions(
        self, timeout_s: float | None = None, *, led_only: bool = False
    ) -> dict[str, int]:
        """Topic name to partition count, from a metadata request. Raises BrokerUnavailable.

        With ``led_only``, list only topics whose every partition has a leader.
        """
        try:
            metadata = self._client.list_topics(timeout=timeout_s or self.timeout_s)
        except KafkaException as exc:
            self._client.poll(0)  # serve librdkafka's log: "waiting for the broker"
            raise BrokerUnavailable(
                f"Kafka at {self.bootstrap} did not answer a metadata request: {exc}; "
                "start it with `onceonly broker` or fix ONCEONLY_KAFKA_BOOTSTRAP"
            ) from exc
        return {
            name: len(t.partitions)
            for name, t in metadata.topics.items()
            if not t.error
            and (not led_only or all(p.leader >= 0 and not p.error for p in t.partitions.values()))
        }

    def broker_ids(self, timeout_s: float | None = None) -> set[int]:
        """The node ids of the brokers that answer a metadata request; raises BrokerUnavailable."""
        try:
            metadata = self._client.list_topics(timeout=timeout_s or self.timeout_s)
        except KafkaException as exc:
            self._client.poll(0)  # serve librdkafka's log: "waiting for the broker"
            raise BrokerUnavailable(
                f"Kafka at {self.bootstrap} did not answer a metadata request: {exc}"
            ) from exc
        return {int(node) for node in metadata.brokers}

    def ping(self, timeout_s: float = 2.0) -> bool:
        try:
            self.topic_partitions(timeout_s)
        except BrokerUnavailable:
            return False
        return True

    def topic_configs(self, names: Iterable[str]) -> dict[str, dict[str, str]]:
        resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
        if not resources:
            return {}
        futures = self._client.describe_configs(resources, request_timeout=self.timeout_s)
        out: dict[str, dict[str, str]] = {}
        for resource, fut in futures.items():
            entries = _result(fut, f"describe topic {resource.name}")
            out[resource.name] = {k: str(v.value) for k, v in entries.items()}
        return out

    def ensure_topics(self, specs: Iterable[TopicSpec]) -> list[TopicStatus]:
        """Create missing topics; check existing ones. Never alters a topic silently.

        Raises TopicMismatch naming every difference when an existing topic has another
        partition count or another value of a checked setting (such as cleanup.policy).
        """
        specs = list(specs)
        existing = self.topic_partitions()
        missing = [s for s in specs if s.name not in existing]
        if missing:
            new = [
                NewTopic(
                    s.name,
                    num_partitions=s.partitions,
                    replication_factor=-1,
                    config={**s.config, **s.create_only},
                )
                for s in missing
            ]
            for name, fut in self._client.create_topics(
                new, request_timeout=self.timeout_s
            ).items():
                try:
                    fut.result()
                except KafkaException as exc:
                    if exc.args[0].code() != _TOPIC_ALREADY_EXISTS:  # a racing creator is fine
                        raise adapter_error(exc, f"create topic {name}") from exc
            existing = self._await_topics([s.name for s in missing])

        problems: list[str] = []
        present = [s for s in specs if s not in missing]
        configs = self.topic_configs(s.name for s in present)
        for spec in present:
            if existing[spec.name] != spec.partitions:
                problems.append(
                    f"{spec.name} has {existing[spec.name]} partitions, "
                    f"onceonly is configured for {spec.partitions}"
                )
            for key, want in spec.config.items():
                have = configs.get(spec.name, {}).get(key)
                if have != want:
                    problems.append(f"{spec.name} has {key}={have}, onceonly needs {key}={want}")
        if problems:
            raise TopicMismatch(
                "existing topics do not match the configuration: "
                + "; ".join(problems)
                + ". Fix ONCEONLY_PARTITIONS or the topic (see README, 'Raising the "
                "partition count'); onceonly will not run on a wrong topic."
            )
        return [
            TopicStatus(s.name, created=s in missing, partitions=existing[s.name]) for s in specs
        ]

    def _await_topics(self, names: list[str]) -> dict[str, int]:
        """Metadata lags creation by a moment: wait until every new topic has its leaders."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            existing = self.topic_partitions(led_only=True)
            if all(name in existing for name in names) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        absent = [name for name in names if name not in existing]
        if absent:
            raise KafkaAdapterError(
                f"created topics {absent} but the broker does not list them after "
                f"{self.timeout_s} s; check the broker log"
            )
        return existing


def _result(fut: Any, what: str) -> Any:
    try:
        return fut.result()
    except KafkaException as exc:
        raise adapter_error(exc, what) from exc


_TOPIC_ALREADY_EXISTS = 36  # KafkaError.TOPIC_ALREADY_EXISTS
