"""``python -m devstack``: the development commands of a checkout, beside the product's
``onceonly`` command: ``broker`` (a local Kafka from the official jars), ``up`` (what
``make run`` runs) and ``send`` (signed sample deliveries). None of them ships in the wheel.
"""

from __future__ import annotations

import sys

import click

from devstack.cli_send import send
from devstack.cli_up import up
from onceonly.cli.startup import settings_from_env


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """onceonly's development commands: a local broker, the whole local stack, samples.

    Configuration comes from the same ONCEONLY_* environment variables as `onceonly`.
    """


@main.command()
@click.option("--fetch-only", is_flag=True, help="Fetch the Kafka jars with Maven, then exit.")
@click.option(
    "--nodes",
    type=click.IntRange(1, 5),
    default=1,
    show_default=True,
    help="Nodes (broker + controller, one JVM each) on the bootstrap port and the ports after it.",
)
@click.option(
    "--sasl",
    is_flag=True,
    help="Clients and brokers speak SASL_PLAINTEXT with SCRAM: the user is "
    "ONCEONLY_KAFKA_SASL_USERNAME / _PASSWORD, created when the storage is formatted.",
)
@click.option(
    "--restart-delay",
    type=click.FloatRange(0, 3600),
    default=10.0,
    show_default=True,
    help="A cluster's node that died is restarted on its data after this many seconds "
    "(at most 3 times in 10 minutes); `kill -USR1 <pid>` restarts it at once.",
)
def broker(fetch_only: bool, nodes: int, sasl: bool, restart_delay: float) -> None:
    """Run a local Kafka (KRaft) broker or cluster in the foreground, from the official jars.

    In a cluster, a node that dies is reported and restarted on its data while the others
    keep serving; Ctrl-C (or SIGTERM) stops every node."""
    from devstack.jars import kafka_classpath
    from devstack.up import ClusterSupervisor, port_of, run_foreground, single_broker

    settings = settings_from_env()
    run_dir = settings.run_dir.resolve()
    if fetch_only:
        classpath = kafka_classpath(run_dir)
        click.echo(f"kafka jars ready ({classpath.count(':') + 1} on the classpath)")
        return
    if not settings.is_local_broker:
        raise click.ClickException(
            f"ONCEONLY_KAFKA_BOOTSTRAP={settings.kafka_bootstrap} names an external cluster; "
            "nothing local is started"
        )
    port = port_of(settings.kafka_bootstrap)
    if sasl and nodes == 1:
        raise click.UsageError("--sasl runs a cluster: give --nodes 3")
    if nodes == 1:
        sys.exit(run_foreground(single_broker(run_dir, port, settings.broker_heap_mb)))
    from devstack.cluster import CLUSTER_HEAP_MB, LocalCluster, scram_user

    heap_mb = min(settings.broker_heap_mb, CLUSTER_HEAP_MB)
    user = scram_user(settings) if sasl else None
    cluster = LocalCluster(run_dir, port=port, nodes=nodes, heap_mb=heap_mb, user=user)
    sys.exit(run_foreground(ClusterSupervisor(cluster, restart_delay_s=restart_delay)))


@main.command()
@click.argument("which", type=click.Choice(["newest", "oldest"]))
def deps(which: str) -> None:
    """Run the unit tests on the newest (or oldest) versions pyproject.toml allows of the
    libraries onceonly rests on, in a throwaway virtualenv (devstack/deps.py says which)."""
    from devstack.deps import run

    sys.exit(run(which))


main.add_command(send)
main.add_command(up)
