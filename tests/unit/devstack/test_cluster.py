"""The local cluster's pure parts: the quorum, the SCRAM listener, the one cluster id."""

from __future__ import annotations

from pathlib import Path

import pytest

from devstack.cluster import LocalCluster, ScramUser, cluster_id, sasl_properties, voters
from devstack.exceptions import BrokerError


def test_voters_name_nodes_one_to_n_on_their_controller_ports() -> None:
    assert voters([7001, 7002, 7003]) == "1@127.0.0.1:7001,2@127.0.0.1:7002,3@127.0.0.1:7003"


def test_nodes_listen_on_the_bootstrap_port_and_the_ports_after_it(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, port=39092, nodes=3)
    assert cluster.bootstrap == "127.0.0.1:39092,127.0.0.1:39093,127.0.0.1:39094"
    assert [n.broker_dir.name for n in cluster.nodes] == ["broker-1", "broker-2", "broker-3"]
    controllers = {n.controller_port for n in cluster.nodes}
    assert len(controllers) == 3
    assert not controllers & {39092, 39093, 39094}


def test_the_cluster_id_is_made_once_and_kept(tmp_path: Path) -> None:
    first = cluster_id(tmp_path)
    assert cluster_id(tmp_path) == first
    assert (tmp_path / "cluster.id").read_text().strip() == first


def test_a_plaintext_cluster_has_no_sasl_lines() -> None:
    assert sasl_properties(None) == ""


def test_a_scram_listener_logs_the_brokers_in_as_the_user() -> None:
    text = sasl_properties(ScramUser("onceonly", "s3cret", "SCRAM-SHA-512"))
    assert "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512" in text
    assert "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512" in text
    assert 'username="onceonly" password="s3cret";' in text


@pytest.mark.parametrize(
    ("name", "password", "mechanism"),
    [("onceonly", 'a"b', "SCRAM-SHA-256"), ("", "x", "SCRAM-SHA-256"), ("u", "p", "PLAIN")],
)
def test_a_user_that_cannot_be_written_into_the_config_is_refused(
    name: str, password: str, mechanism: str
) -> None:
    with pytest.raises(BrokerError):
        ScramUser(name, password, mechanism)
