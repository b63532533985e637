"""The broker faults of a chaos run, one after the other as chaos.plan.broker_faults planned
them: the single broker restarted; on a cluster, the busiest leader SIGKILLed and a
rolling restart of every node."""

from __future__ import annotations

import asyncio

from chaos.brokers import ClusterBroker
from chaos.common import DELIVERIES_TOPIC, PARTITIONS, ChaosError, now
from chaos.plan import (
    LEADER_KILL,
    RESTART,
    ROLLING_RESTART,
    BrokerFault,
    busiest_leader,
    led_elsewhere,
    under_replicated,
)
from chaos.stack import Stack
from onceonly.foundation.kafka import BrokerUnavailable, PartitionState

#: how long a node may take to be back in every partition's in-sync replicas
IN_SYNC_TIMEOUT_S = 180.0
#: how long the partitions a killed node led may stay without a new leader
ELECTION_TIMEOUT_S = 60.0


class BrokerFaults(Stack):
    """The broker faults: each a coroutine that returns once the broker is whole again."""

    async def broker_faults(self, faults: list[BrokerFault], t0: float) -> None:
        for fault in faults:
            await asyncio.sleep(max(0.0, t0 + fault.at_s - now()))
            self.broker_busy = True
            try:
                if fault.kind == RESTART:
                    await self._restart_single()
                elif fault.kind == LEADER_KILL:
                    await self._kill_leader(self._cluster())
                elif fault.kind == ROLLING_RESTART:
                    await self._rolling_restart(self._cluster())
                else:
                    raise ChaosError(f"no such broker fault: {fault.kind}")
            finally:
                self.broker_busy = False

    def _cluster(self) -> ClusterBroker:
        if not isinstance(self.broker, ClusterBroker):
            raise ChaosError("leader kills and rolling restarts need a cluster (--nodes 3)")
        return self.broker

    async def _restart_single(self) -> None:
        self.event("broker: stopping (SIGTERM)")
        started = now()
        await asyncio.to_thread(self.broker.stop)
        self.event(f"broker: stopped in {now() - started:.1f} s")
        await asyncio.sleep(self.opts.broker_down_s)
        await asyncio.to_thread(self.broker.start_and_wait)
        down = now() - started
        self.broker_restarts.append(f"at {self.elapsed() - down:.0f}s, down {down:.0f}s")
        self.event(f"broker: back on {self.bootstrap} after {down:.1f} s")

    async def _states(self, cluster: ClusterBroker) -> list[PartitionState] | None:
        try:
            return await asyncio.to_thread(cluster.states)
        except BrokerUnavailable:
            return None

    async def _kill_leader(self, cluster: ClusterBroker) -> None:
        """SIGKILL the node leading the most deliveries partitions; start it again after
        --broker-down-s on its data; wait until every partition is in sync again."""
        states = await self._states(cluster)
        busiest = busiest_leader(states or [], DELIVERIES_TOPIC)
        if busiest is None:
            raise ChaosError("no node leads a partition of the deliveries topic")
        node, led = busiest
        at = self.elapsed()
        killed = now()
        await asyncio.to_thread(cluster.kill_node, node)
        self.event(
            f"cluster: SIGKILL node {node}, the leader of {led} of {PARTITIONS} "
            f"{DELIVERIES_TOPIC} partitions"
        )
        election = asyncio.create_task(self._until_led_elsewhere(cluster, node, killed))
        await asyncio.sleep(self.opts.broker_down_s)
        await asyncio.to_thread(cluster.start_node, node)
        back = now() - killed
        self.event(f"cluster: node {node} back after {back:.1f} s (same data dir)")
        elected = await election
        in_sync = await self._until_in_sync(cluster, killed)
        self.broker_restarts.append(
            f"SIGKILL of node {node} (led {led}/{PARTITIONS}) at {at:.0f}s: new leaders "
            f"after {elected}, back after {back:.0f} s, all in sync after {in_sync}"
        )

    async def _rolling_restart(self, cluster: ClusterBroker) -> None:
        """Every node in turn: SIGTERM, start it again, and the next one only once every
        partition is in sync (so min.insync.replicas=2 always holds for the others)."""
        at = self.elapsed()
        started = now()
        steps = []
        for node in cluster.node_ids:
            self.event(f"cluster: rolling restart, stopping node {node} (SIGTERM)")
            stopping = now()
            await asyncio.to_thread(cluster.stop_node, node)
            stopped = now() - stopping
            await asyncio.to_thread(cluster.start_node, node)
            back = now() - stopping
            in_sync = await self._until_in_sync(cluster, stopping)
            self.event(
                f"cluster: node {node} stopped in {stopped:.1f} s, back after {back:.1f} s, "
                f"all partitions in sync after {in_sync}"
            )
            steps.append(f"node {node} back after {back:.0f} s, in sync after {in_sync}")
        self.broker_restarts.append(
            f"rolling restart at {at:.0f}s, {now() - started:.0f} s: " + "; ".join(steps)
        )

    async def _until_led_elsewhere(self, cluster: ClusterBroker, node: int, since: float) -> str:
        """Seconds from ``since`` until no deliveries partition is led by ``node`` or by none."""
        while now() < since + ELECTION_TIMEOUT_S:
            states = await self._states(cluster)
            if states is not None and led_elsewhere(states, DELIVERIES_TOPIC, node):
                elected = now() - since
                self.event(
                    f"cluster: every {DELIVERIES_TOPIC} partition led elsewhere after "
                    f"{elected:.1f} s"
                )
                return f"{elected:.1f} s"
            await asyncio.sleep(0.2)
        self.event(
            f"cluster: partitions still led by node {node} or none after {ELECTION_TIMEOUT_S:g} s"
        )
        return f"over {ELECTION_TIMEOUT_S:g} s"

    async def _until_in_sync(self, cluster: ClusterBroker, since: float) -> str:
        """Seconds from ``since`` until no partition of any topic is under-replicated."""
        while now() < since + IN_SYNC_TIMEOUT_S:
            states = await self._states(cluster)
            if states is not None and under_replicated(states) == 0:
                return f"{now() - since:.1f} s"
            await asyncio.sleep(0.5)
        states = await self._states(cluster)
        left = "?" if states is None else str(under_replicated(states))
        self.event(
            f"cluster: {left} partitions still under-replicated after "
            f"{IN_SYNC_TIMEOUT_S:g} s; going on"
        )
        return f"over {IN_SYNC_TIMEOUT_S:g} s ({left} partitions under-replicated)"
