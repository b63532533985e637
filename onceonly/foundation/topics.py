"""The topics onceonly needs, derived from the settings."""

from __future__ import annotations

from onceonly.foundation.kafka import TopicSpec
from onceonly.foundation.settings import Settings

WEEK_MS = 7 * 24 * 3600 * 1000
#: the ledger's ``min.compaction.lag.ms``: Kafka's cleaner leaves a record this young,
#: even one a later record of its key follows. A worker that lands a late *pending*
#: record reads the settled record before it to write it again (``TableLedger``), and a
#: pause can put minutes between the two; compacted at once (Kafka's default, 0), the
#: settled record could be gone first and the late one stay the key's last word (the
#: simulator's finding F22, seed 496628371)
LEDGER_COMPACTION_LAG_MS = 10 * 60 * 1000


def topic_specs(settings: Settings) -> list[TopicSpec]:
    """Deliveries (keyed by thread), the compacted reply ledger, the dead letters, and the
    worker's decisions (its skips, on the partition of the delivery each one names), each
    replicated ``ONCEONLY_REPLICATION_FACTOR`` times (unset: decided by
    :meth:`Admin.ensure_topics` from the number of brokers)."""
    record_bytes = str(settings.record_max_bytes)
    decisions_ms = str(int(settings.decisions_retention.total_seconds() * 1000))
    replication = settings.replication_factor
    return [
        TopicSpec(
            settings.deliveries_topic,
            settings.partitions,
            config={"cleanup.policy": "delete"},
            create_only={"retention.ms": str(WEEK_MS), "max.message.bytes": record_bytes},
            replication=replication,
        ),
        TopicSpec(
            settings.ledger_topic,
            settings.partitions,
            config={"cleanup.policy": "compact"},
            create_only={
                "max.message.bytes": record_bytes,
                "min.compaction.lag.ms": str(LEDGER_COMPACTION_LAG_MS),
            },
            replication=replication,
        ),
        TopicSpec(
            settings.dead_letter_topic,
            1,
            config={"cleanup.policy": "delete"},
            # dead letters wait for an operator: keep them until retried or purged
            create_only={"retention.ms": "-1", "max.message.bytes": record_bytes},
            replication=replication,
        ),
        TopicSpec(
            settings.decisions_topic,
            settings.partitions,
            config={"cleanup.policy": "delete"},
            create_only={"retention.ms": decisions_ms},
            replication=replication,
        ),
    ]
