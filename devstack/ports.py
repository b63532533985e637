"""Ports on this machine: a free one, a free run of them, a free one by number, one that
accepts connections."""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def port_is_free(port: int) -> bool:
    """Whether Kafka could bind ``127.0.0.1:port`` (it sets SO_REUSEADDR too)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
        return True


def free_run_of_ports(count: int) -> int:
    """A port such that it and the ``count - 1`` after it are free right now (a local
    cluster's nodes listen on a run of ports)."""
    while True:
        first = free_port()
        if first + count <= 65535 and all(port_is_free(first + n) for n in range(count)):
            return first


def accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.5):
            return True
    except OSError:
        return False
