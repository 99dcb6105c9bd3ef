"""Which Host headers the server answers: the address it was bound to, and loopback names.

A guard against DNS rebinding: a page on another site whose name is made to resolve to
127.0.0.1 sends its own name as Host, and is refused (400). Bound to a wildcard (0.0.0.0 or
::), the server is reachable at every address of this machine, so it answers those addresses
and the machine's own names — still never an arbitrary name.
"""

from __future__ import annotations

import ipaddress
import socket

from starlette.responses import PlainTextResponse

LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "::1"]
WILDCARDS = ("0.0.0.0", "::", "")


def is_loopback(host: str) -> bool:
    """Is ``host`` a loopback name or address (only this machine can connect)?"""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _machine_names() -> list[str]:
    """This machine's host names and addresses (what other machines may call it)."""
    names = {socket.gethostname(), socket.getfqdn()}
    for name in list(names):
        try:
            for info in socket.getaddrinfo(name, None):
                names.add(info[4][0])
        except OSError:
            pass
    return sorted(n for n in names if n)


def allowed_hosts_for(host: str) -> list[str]:
    """Host header values to accept when bound to ``host``: it, and the loopback names; for a
    wildcard bind, also this machine's names and addresses."""
    bound = host.strip("[]")
    allowed = [*LOOPBACK_HOSTS]
    if bound in WILDCARDS:
        allowed += ["0.0.0.0", "::", *_machine_names()]
    elif bound not in allowed:
        allowed.append(bound)
    return list(dict.fromkeys(a.lower() for a in allowed))


def host_name(header: str) -> str:
    """The host part of a Host header: ``[::1]:8765`` → ``::1``, ``Example:80`` → ``example``."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    if header.count(":") > 1:  # a bare IPv6 address (not valid in Host, but be exact)
        return header
    return header.split(":", 1)[0]


class HostCheck:
    """ASGI middleware: 400 unless the Host header names an allowed host."""

    def __init__(self, app, allowed_hosts: list[str]):
        self.app = app
        self.allowed = {h.strip("[]").lower() for h in allowed_hosts}

    async def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket"):
            headers = dict(scope.get("headers") or [])
            name = host_name(headers.get(b"host", b"").decode("latin-1"))
            if name not in self.allowed:
                response = PlainTextResponse(
                    "Invalid host header: this server answers only its own address "
                    "(see qkv explore --host)", status_code=400)
                return await response(scope, receive, send)
        return await self.app(scope, receive, send)
