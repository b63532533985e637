"""Ports on this machine: a free one, a free run of them, a free one by number, one that
accepts connections. Ports to listen on are picked below the kernel's range for outgoing
connections, which no client can take from under a listener that has yet to bind."""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOOPBACK = "127.0.0.1"

#: where the kernel picks the local ports of outgoing connections (Linux's default)
_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
_DEFAULT_EPHEMERAL = (32768, 60999)
#: listeners are picked from here up to the ephemeral range
_LOWEST = 10000
_random = random.SystemRandom()


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports."""
    try:
        low, high = (int(n) for n in _EPHEMERAL.read_text(encoding="ascii").split())
    except (OSError, ValueError):
        return _DEFAULT_EPHEMERAL
    return low, high


def free_run_of_ports(count: int) -> int:
    """A port such that it and the ``count - 1`` after it are free right now, below the
    kernel's range for outgoing connections: a broker binds its port seconds after it is
    picked, and a port from that range (what binding port 0 gives) can meanwhile become
    the local end of any process's outgoing connection ("Address already in use")."""
    low = ephemeral_range()[0]
    if low - count <= _LOWEST:  # no room below it: the kernel's pick, as before
        while True:
            first = _kernel_pick()
            if first + count <= 65535 and all(port_is_free(first + n) for n in range(count)):
                return first
    while True:
        first = _random.randrange(_LOWEST, low - count)
        if all(port_is_free(first + n) for n in range(count)):
            return first


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, below the range of
    outgoing connections' ports (see free_run_of_ports)."""
    return free_run_of_ports(1)


def _kernel_pick() -> int:
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


def accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.5):
            return True
    except OSError:
        return False
