"""Ports picked for listeners: free, and out of the way of outgoing connections."""

from __future__ import annotations

import socket

import pytest

from devstack import ports
from devstack.ports import LOOPBACK, ephemeral_range, free_port, free_run_of_ports


def test_a_free_port_lies_below_the_range_outgoing_connections_take_ports_from() -> None:
    low, _ = ephemeral_range()
    ports = {free_port() for _ in range(50)}
    assert all(port < low for port in ports), sorted(ports)


def test_a_free_port_can_be_bound() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, free_port()))


def test_a_free_run_is_free_throughout_and_below_the_outgoing_range() -> None:
    first = free_run_of_ports(3)
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(3)]
    try:
        for n, sock in enumerate(socks):
            sock.bind((LOOPBACK, first + n))
    finally:
        for sock in socks:
            sock.close()
    assert first + 2 < ephemeral_range()[0]


def test_a_port_something_listens_on_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind((LOOPBACK, free_port()))
        taken.listen()
        used = taken.getsockname()[1]
        other = free_port()
        picks = iter([used, other])
        monkeypatch.setattr(ports._random, "randrange", lambda *_: next(picks))
        assert ports.free_port() == other
