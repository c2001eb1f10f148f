"""Where an outcome may be sent: a callback URL must reach a public host.

A `callback_url` comes from whoever calls the intake API, and the server POSTs to it later;
without a check it could reach loopback services, the private network or a cloud metadata
endpoint. It is checked at intake (an address written as a private IP, or a name that is
always local) and again at delivery, after DNS resolution. `REFUND_DESK_ALLOW_PRIVATE_CALLBACKS`
turns both off for local set-ups and tests.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

LOCAL_NAMES = ("localhost", "metadata.google.internal", "metadata")


def _bad_ip(value: str) -> bool:
    try:
        ip = ipaddress.ip_address(value.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast


def problem(url: str) -> str | None:
    """Why `url` may not be a callback, judged without DNS; None if it may."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return "must be an http or https URL"
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        return "must name a host"
    if host in LOCAL_NAMES or host.endswith(".localhost") or _bad_ip(host):
        return "must reach a public host (not loopback, private, link-local or metadata)"
    return None


def problem_resolved(url: str) -> str | None:
    """`problem`, then every address the host resolves to must be public."""
    found = problem(url)
    if found:
        return found
    parts = urlsplit(url)
    try:
        infos = socket.getaddrinfo(parts.hostname, parts.port or 443, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None  # the delivery itself reports an unreachable host
    if any(_bad_ip(str(info[4][0])) for info in infos):
        return "resolves to a non-public address (loopback, private, link-local or metadata)"
    return None
