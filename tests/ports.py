"""A TCP port for a child process to bind later, without the probe-then-bind race.

``find_free_port`` (bind to port 0, read the choice, close) returns a port from the kernel's
ephemeral range, the range it also hands out for every outgoing connection and every other
``bind(0)`` -- so between the probe and the child's own bind, anything on the machine may take it.
:func:`port_for_a_child` picks a random port *below* that range instead (the kernel never assigns
those by itself), free right now. Where the child can pick its own port, tests let it: torchrun
``--standalone`` (its store binds port 0 and tells the ranks), ``file://`` process-group init.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOWEST = 20000  # below the well-known services people run on 1xxxx ports


def port_is_free(port: int, host: str = "") -> bool:
    """Can this node listen on ``port``? (What torchrun's master / the JAX coordinator will do.)"""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Without SO_REUSEADDR, like the first bind of a fresh listener.
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def port_for_a_child(host: str = "127.0.0.1") -> int:
    """A random port below the ephemeral range that is free on ``host`` now."""
    high = _ephemeral_low()
    low = LOWEST if high - LOWEST >= 1000 else 1024
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(low, high)
        if port_is_free(port, host):
            return port
    raise RuntimeError(f"no free port in [{low}, {high}) on {host}")
