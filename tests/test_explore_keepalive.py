"""Requests on one kept-alive connection are as quick as on a fresh one.

The server's listening socket once said protocol 0, so asyncio never set TCP_NODELAY on the
connections it accepted; Nagle's algorithm then held the second write of every response
(uvicorn writes headers and body apart) until the client's delayed ACK, ~40 ms. Browsers keep
connections alive, so every slider step paid it. Loopback only.
"""

from __future__ import annotations

import http.client
import json
import socket
import statistics
import time
from urllib.parse import urlsplit

from qkv.explore.server import bind
from test_explore_live import cli_server

REQUESTS = 12
# Nagle meeting a delayed ACK costs ~40 ms a request; a served request on loopback ~1–5 ms,
# more on a loaded machine. The median of a dozen sits far from both.
SLOW = 0.025


def test_the_listening_socket_says_tcp_so_asyncio_sets_nodelay():
    sock = bind("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
    finally:
        sock.close()


def timed_requests(conn: http.client.HTTPConnection, method: str, path: str,
                   body: bytes | None) -> list[float]:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    seconds = []
    for _ in range(REQUESTS):
        t0 = time.perf_counter()
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        seconds.append(time.perf_counter() - t0)
        assert response.status == 200, (path, response.status)
        assert not response.will_close, "the server closed the kept-alive connection"
    return seconds[1:]  # the first may load a module


def test_requests_on_a_kept_alive_connection_take_no_nagle_delay():
    with cli_server() as url:
        parts = urlsplit(url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        try:
            for method, path, body in (("GET", "/api/health", None),
                                       ("POST", "/api/scale", json.dumps({"d_k": 4}).encode())):
                seconds = timed_requests(conn, method, path, body)
                median = statistics.median(seconds)
                assert median < SLOW, (
                    f"{method} {path}: median {median * 1e3:.1f} ms per request on one "
                    f"connection ({', '.join(f'{s * 1e3:.0f}' for s in seconds)} ms): "
                    "TCP_NODELAY is not set on the server's connections")
        finally:
            conn.close()
