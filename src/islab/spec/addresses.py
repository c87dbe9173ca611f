"""Host names and ``host:port`` addresses as the user writes them (pure text, no lookups)."""

from __future__ import annotations

import ipaddress
import re

_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOSTNAME_PATTERN = re.compile(rf"(?=.{{1,253}}\Z){_HOST_LABEL}(?:\.{_HOST_LABEL})*\.?")


def is_valid_host(host: str) -> bool:
    """A DNS host name (RFC 1123 labels) or an IPv4/IPv6 literal; nothing a shell could mis-read."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return bool(HOSTNAME_PATTERN.fullmatch(host))


def split_host_port(address: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` -> (host, port); raises ValueError with a reason."""
    if address.startswith("["):
        host, sep, rest = address[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ValueError("an IPv6 address must be written [addr]:port")
        port_text = rest[1:]
    else:
        host, sep, port_text = address.rpartition(":")
        if not sep:
            raise ValueError("it has no ':port'")
        if ":" in host:
            raise ValueError("write an IPv6 address as [addr]:port")
    if not is_valid_host(host):
        raise ValueError(f"'{host}' is not a valid host name or IP address")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"the port '{port_text}' is not a number between 1 and 65535")
    return host, int(port_text)


def join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
