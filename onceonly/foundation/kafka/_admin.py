"""Topic administration and broker checks over confluent-kafka's AdminClient."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_exponential

from onceonly.foundation.kafka._connection import Connection
from onceonly.foundation.kafka._errors import adapter_error
from onceonly.foundation.kafka._replication import (
    cluster_size,
    replicated_config,
    replication_factor,
    topic_problems,
)
from onceonly.foundation.kafka._security import AuthWatch
from onceonly.foundation.kafka.exceptions import (
    AuthenticationFailed,
    BrokerUnavailable,
    KafkaAdapterError,
    TopicMismatch,
    TopicMissing,
)

#: What a cluster says while a node restarts or a new topic's metadata spreads: worth asking
#: again. Anything else (refused credentials, a topic of the wrong shape) is final.
_TRANSIENT = (BrokerUnavailable, TopicMissing)

#: What a group's coordinator answers while the offsets topic is created or loaded (a new
#: cluster's first group, a coordinator that just moved): asking again soon is answered.
_COORDINATOR_PENDING = frozenset(
    {
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
    }
)

#: the partition whose committed offset asks a group's coordinator (any name will do: the
#: coordinator answers for the group, and a topic it has no offset for is answered -1001)
_PROBE_TOPIC = "__consumer_offsets"


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """A topic onceonly needs. ``config`` holds the settings that must match exactly."""

    name: str
    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)
    #: settings applied on creation only (retention, record size), not checked later
    create_only: Mapping[str, str] = field(default_factory=dict)
    #: replicas per partition; None: 3 on a cluster of 3 brokers or more, else 1
    replication: int | None = None


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One partition as a metadata request sees it: its leader (-1: none), its replicas
    and the replicas in sync."""

    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicStatus:
    name: str
    created: bool
    partitions: int
    replicas: int = 1


class Admin:
    """The operations onceonly needs from a broker, with errors mapped to ours."""

    def __init__(
        self, connection: Connection, *, timeout_s: float | None = None, **extra: Any
    ) -> None:
        self.bootstrap = connection.bootstrap
        self.timeout_s = connection.request_timeout_s if timeout_s is None else timeout_s
        self._auth = AuthWatch()
        self._config = connection.config(**{"error_cb": self._auth, **extra})
        self._client = AdminClient(self._config)

    def _metadata(self, timeout_s: float | None) -> Any:
        """A metadata request; AuthenticationFailed if the credentials were refused, else
        BrokerUnavailable if nobody answered."""
        try:
            return self._client.list_topics(timeout=timeout_s or self.timeout_s)
        except KafkaException as exc:
            self._client.poll(0)  # serve librdkafka's log: "waiting for the broker"
            self._auth.raise_if_refused(self._client, self.bootstrap)
            raise BrokerUnavailable(
                f"Kafka at {self.bootstrap} did not answer a metadata request: {exc}; "
                "start it with `python -m devstack broker` or fix ONCEONLY_KAFKA_BOOTSTRAP"
            ) from exc

    def topic_partitions(
        self, timeout_s: float | None = None, *, led_only: bool = False
    ) -> dict[str, int]:
        """Topic name to partition count, from a metadata request. Raises BrokerUnavailable.

        With ``led_only``, list only topics whose every partition has a leader.
        """
        return {name: count for name, (count, _) in self.topic_shapes(timeout_s, led_only).items()}

    def topic_shapes(
        self, timeout_s: float | None = None, led_only: bool = False
    ) -> dict[str, tuple[int, int]]:
        """Topic name to (partitions, fewest replicas of a partition); see topic_partitions."""
        metadata = self._metadata(timeout_s)
        return {
            name: (
                len(t.partitions),
                min((len(p.replicas) for p in t.partitions.values()), default=0),
            )
            for name, t in metadata.topics.items()
            if not t.error
            and (not led_only or all(p.leader >= 0 and not p.error for p in t.partitions.values()))
        }

    def partition_states(self, timeout_s: float | None = None) -> list[PartitionState]:
        """Every partition of every topic: leader, replicas, in-sync replicas. Raises
        BrokerUnavailable."""
        metadata = self._metadata(timeout_s)
        return [
            PartitionState(
                topic=name,
                partition=int(number),
                leader=int(p.leader),
                replicas=tuple(int(r) for r in p.replicas),
                isr=tuple(int(r) for r in p.isrs),
            )
            for name, t in sorted(metadata.topics.items())
            if not t.error
            for number, p in sorted(t.partitions.items())
        ]

    def replication_for(self, configured: int | None) -> int:
        """The replication factor for ``configured`` (None: from the number of brokers)."""
        if configured is not None:
            return configured
        return replication_factor(configured, self.cluster_size())

    def cluster_size(self, timeout_s: float | None = None) -> int:
        """The brokers of the cluster, those down included (:func:`cluster_size`)."""
        metadata = self._metadata(timeout_s)
        return cluster_size(
            (int(node) for node in metadata.brokers),
            (p.replicas for t in metadata.topics.values() for p in t.partitions.values()),
        )

    def broker_ids(self, timeout_s: float | None = None) -> set[int]:
        """The node ids of the brokers that answer a metadata request; raises BrokerUnavailable."""
        metadata = self._metadata(timeout_s)
        return {int(node) for node in metadata.brokers}

    def ping(self, timeout_s: float = 2.0, *, refused_raises: bool = False) -> bool:
        """Whether the brokers answer. Refused credentials are False too, unless
        ``refused_raises``: then AuthenticationFailed, since waiting will not help."""
        try:
            self.topic_partitions(timeout_s)
        except BrokerUnavailable:
            return False
        except AuthenticationFailed:
            if refused_raises:
                raise
            return False
        return True

    def group_coordinator_ready(self, group: str) -> bool:
        """Whether ``group``'s coordinator answers an offset fetch. On a new cluster the first
        ask creates the offsets topic; a consumer that joins before it is loaded logs "Marking
        the coordinator dead" until it is. Any other answer (the group not readable by these
        credentials, ...) is True: the consumer reports it itself.

        Asked by a Consumer carrying the group id, without joining the group, and not by the
        AdminClient's describe_consumer_groups: that request can abort the process in
        librdkafka's admin bookkeeping (``rd_kafka_enq_once_del_source_return: Assertion
        eonce->refcnt > 0``, librdkafka #4605, open), as a worker starting on a three-node
        cluster did (make test, 2026-12-04). tests/unit/foundation/test_no_admin_group_calls.py
        keeps the admin's group requests out of onceonly."""
        return self.await_group_coordinator(group, patience_s=0.0)

    def await_group_coordinator(
        self, group: str, *, patience_s: float = 60.0, interval_s: float = 0.2
    ) -> bool:
        """Wait until :meth:`group_coordinator_ready`, asking with one consumer; False if
        ``patience_s`` passed first."""
        consumer = Consumer({**self._config, "group.id": group, "enable.auto.commit": False})
        deadline = time.monotonic() + patience_s
        try:
            while not self._coordinator_answers(consumer):
                if time.monotonic() >= deadline:
                    return False
                time.sleep(interval_s)
        finally:
            consumer.close()
        return True

    def _coordinator_answers(self, consumer: Consumer) -> bool:
        try:
            consumer.committed([TopicPartition(_PROBE_TOPIC, 0)], timeout=self.timeout_s)
        except KafkaException as exc:
            return exc.args[0].code() not in _COORDINATOR_PENDING
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

    def ensure_topics(
        self, specs: Iterable[TopicSpec], *, patience_s: float | None = None
    ) -> list[TopicStatus]:
        """Create missing topics; check existing ones. Never alters a topic silently.

        Each spec's replication is decided here (:func:`replication_factor`), with
        ``min.insync.replicas=2`` from 3 replicas on. Raises TopicMismatch naming every
        difference when an existing topic has another partition count, replica count or
        value of a checked setting (such as cleanup.policy or min.insync.replicas).

        A request that meets a node restarting (no answer, no leader, a broker that does not
        know a topic yet) is asked again, with backoff, for ``patience_s`` (default: three
        request timeouts) before BrokerUnavailable or TopicMissing is raised: a worker
        started during a rolling restart waits it out instead of exiting.
        """
        wanted = list(specs)
        patience = 3 * self.timeout_s if patience_s is None else patience_s
        for attempt in Retrying(
            retry=retry_if_exception_type(_TRANSIENT),
            stop=stop_after_delay(patience),
            wait=wait_exponential(multiplier=0.2, max=2.0),
            reraise=True,
        ):
            with attempt:
                return self._ensure_topics(wanted)
        raise AssertionError("unreachable: tenacity reraises the last error")  # pragma: no cover

    def _ensure_topics(self, specs: list[TopicSpec]) -> list[TopicStatus]:
        brokers = self.cluster_size()
        wanted = [(s, replication_factor(s.replication, brokers)) for s in specs]
        checked = {s.name: {**s.config, **replicated_config(f)} for s, f in wanted}
        existing = self.topic_shapes()
        missing = [(s, f) for s, f in wanted if s.name not in existing]
        created: set[str] = set()
        if missing:
            # a topic the broker asked did not list yet may exist all the same (metadata
            # reaches each broker in its own time, or another process made it meanwhile):
            # only the topics made here count as created, the others are checked
            created = self._create([(s, f, checked[s.name]) for s, f in missing])
            existing = self._await_topics([s.name for s, _ in missing])
        present = [(s, f) for s, f in wanted if s.name not in created]
        configs = self.topic_configs(s.name for s, _ in present)
        problems = [
            problem
            for spec, factor in present
            for problem in topic_problems(
                spec.name,
                want_partitions=spec.partitions,
                have_partitions=existing[spec.name][0],
                want_replicas=factor,
                have_replicas=existing[spec.name][1],
                want_config=checked[spec.name],
                have_config=configs.get(spec.name, {}),
            )
        ]
        if problems:
            raise TopicMismatch(
                "existing topics do not match the configuration: "
                + "; ".join(problems)
                + ". Fix ONCEONLY_PARTITIONS / ONCEONLY_REPLICATION_FACTOR or the topic (see "
                "README, 'Raising the partition count'); onceonly will not run on a wrong topic."
            )
        return [TopicStatus(s.name, s.name in created, *existing[s.name]) for s, _ in wanted]

    def _create(self, new: list[tuple[TopicSpec, int, Mapping[str, str]]]) -> set[str]:
        """Create the topics; the names of those made here (not those that existed)."""
        topics = [
            NewTopic(
                spec.name,
                num_partitions=spec.partitions,
                replication_factor=factor,
                config={**checked, **spec.create_only},
            )
            for spec, factor, checked in new
        ]
        made: set[str] = set()
        for name, fut in self._client.create_topics(topics, request_timeout=self.timeout_s).items():
            try:
                fut.result()
            except KafkaException as exc:
                if exc.args[0].code() != _TOPIC_ALREADY_EXISTS:  # it exists: checked after
                    raise adapter_error(exc, f"create topic {name}") from exc
            else:
                made.add(name)
        return made

    def _await_topics(self, names: list[str]) -> dict[str, tuple[int, int]]:
        """Metadata lags creation by a moment: wait until every new topic has its leaders."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            existing = self.topic_shapes(led_only=True)
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
