"""The broker faults of a chaos run: when they come, which node a leader kill hits, when a
cluster is whole again (chaos/plan.py)."""

from __future__ import annotations

import random

import pytest

from chaos.plan import (
    LEADER_KILL,
    RESTART,
    ROLLING_RESTART,
    BrokerFault,
    broker_faults,
    busiest_leader,
    led_elsewhere,
    under_replicated,
)
from onceonly.foundation.kafka import PartitionState

TOPIC = "deliveries"


def part(
    n: int, leader: int, isr: tuple[int, ...] = (1, 2, 3), topic: str = TOPIC
) -> PartitionState:
    return PartitionState(topic, n, leader, (1, 2, 3), isr)


def plan(
    nodes: int, *, restarts: int = 1, leader_kills: int = 1, seed: int = 7
) -> list[BrokerFault]:
    return broker_faults(
        nodes=nodes,
        restarts=restarts,
        leader_kills=leader_kills,
        window_s=400.0,
        fresh_s=250.0,
        rng=random.Random(seed),
    )


@pytest.mark.parametrize("seed", range(20))
def test_the_single_broker_restarts_in_the_middle_half_of_the_whole_load(seed: int) -> None:
    faults = plan(1, restarts=2, seed=seed)

    assert [f.kind for f in faults] == [RESTART, RESTART]
    assert all(100.0 <= f.at_s <= 300.0 for f in faults)
    assert faults == sorted(faults, key=lambda f: f.at_s)


def test_the_single_broker_draws_what_it_drew_before_the_cluster_faults() -> None:
    """A seed of an earlier single-node run plans the same restart: one draw per restart."""
    rng = random.Random(5)
    expected = sorted(rng.uniform(0.25, 0.75) * 400.0 for _ in range(2))

    assert [f.at_s for f in plan(1, restarts=2, seed=5)] == expected


def test_the_single_broker_has_no_leader_to_kill() -> None:
    assert [f.kind for f in plan(1, restarts=1, leader_kills=3)] == [RESTART]


@pytest.mark.parametrize("seed", range(20))
def test_on_a_cluster_a_leader_kill_then_a_rolling_restart_while_new_messages_arrive(
    seed: int,
) -> None:
    kill, rolling = plan(3, seed=seed)

    assert kill.kind == LEADER_KILL and 50.0 <= kill.at_s <= 87.5
    assert rolling.kind == ROLLING_RESTART and 112.5 <= rolling.at_s <= 137.5


def test_on_a_cluster_the_counts_are_the_options() -> None:
    faults = plan(3, restarts=2, leader_kills=3)

    assert sorted(f.kind for f in faults) == [LEADER_KILL] * 3 + [ROLLING_RESTART] * 2
    assert faults == sorted(faults, key=lambda f: f.at_s)
    assert plan(3, restarts=0, leader_kills=0) == []


def test_the_leader_kill_hits_the_node_leading_the_most_deliveries_partitions() -> None:
    states = [part(0, 2), part(1, 3), part(2, 2), part(3, 1), part(4, 2), part(5, 3)]
    others = [part(n, 3, topic="replies") for n in range(6)]

    assert busiest_leader(states + others, TOPIC) == (2, 3)


def test_a_tie_goes_to_the_lowest_node_id() -> None:
    states = [part(0, 3), part(1, 2), part(2, 3), part(3, 2), part(4, -1), part(5, -1)]

    assert busiest_leader(states, TOPIC) == (2, 2)


def test_no_leader_means_no_node_to_kill() -> None:
    assert busiest_leader([part(0, -1), part(1, 1, topic="replies")], TOPIC) is None
    assert busiest_leader([], TOPIC) is None


def test_the_election_is_over_once_every_partition_has_a_leader_other_than_the_dead_node() -> None:
    assert led_elsewhere([part(0, 1), part(1, 3)], TOPIC, 2)
    assert not led_elsewhere([part(0, 1), part(1, 2)], TOPIC, 2)
    assert not led_elsewhere([part(0, 1), part(1, -1)], TOPIC, 2)
    assert led_elsewhere([part(0, 1), part(1, 2, topic="replies")], TOPIC, 2)
    assert not led_elsewhere([part(0, 1, topic="replies")], TOPIC, 2)


def test_under_replicated_counts_partitions_missing_an_in_sync_replica_on_any_topic() -> None:
    states = [part(0, 1), part(1, 1, isr=(1, 3)), part(2, 2, isr=(2,), topic="replies")]

    assert under_replicated(states) == 2
    assert under_replicated([part(0, 1), part(1, 2, isr=(3, 2, 1))]) == 0
