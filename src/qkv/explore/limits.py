"""Limits on what a client can make the server hold: body size, body time, header time.

- :class:`BodyLimits` (ASGI middleware) reads a request's whole body before the app sees it:
  over ``MAX_BODY`` bytes (declared by Content-Length or streamed in chunks) → 413; a client
  that stops sending for ``BODY_IDLE`` seconds, or takes over ``BODY_TOTAL`` in all → 408.
  Before a 413 the rest of the body (up to ``DRAIN_MAX`` bytes, within the same deadlines) is
  read and dropped: closing a socket with unread bytes sends a TCP reset, which a client that
  sent its body eagerly would get instead of the 413. A client that disconnects mid-body gets
  a response it will not read (so the middleware above always sees one — without it, it logs
  a "No response returned" traceback per disconnect, a log any client could flood).
- :class:`TimedH11Protocol` (uvicorn's h11 protocol) closes a connection whose request headers
  are not complete ``HEADER_TIMEOUT`` seconds after it opened or after its last response, so a
  client that connects and sends nothing (or half a header) does not hold a connection forever.
  Idle keep-alive connections are closed by uvicorn's ``timeout_keep_alive``.
"""

from __future__ import annotations

import asyncio
import json

MAX_BODY = 1_000_000  # bytes: the largest valid request is far smaller
BODY_IDLE = 10.0  # seconds without a byte of the body
BODY_TOTAL = 30.0  # seconds for the whole body
HEADER_TIMEOUT = 10.0  # seconds for the request line and headers
DRAIN_MAX = 16 * MAX_BODY  # bytes of an oversized body read (and dropped) before the 413


class BodyLimits:
    """ASGI middleware: the body read in full (and bounded in size and time) before the app."""

    def __init__(self, app, max_body: int = MAX_BODY, idle: float = BODY_IDLE,
                 total: float = BODY_TOTAL):
        self.app = app
        self.max_body, self.idle, self.total = max_body, idle, total

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        too_large = f"the request body is larger than {self.max_body:,} bytes"
        declared = dict(scope.get("headers") or []).get(b"content-length")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.total

        async def next_message():
            """The next body message, or None when the client stalled or ran out of time."""
            wait = min(self.idle, deadline - loop.time())
            try:
                return await asyncio.wait_for(receive(), timeout=max(wait, 0.0))
            except TimeoutError:
                return None

        async def refuse_large(read: int, more: bool) -> None:
            # Read the rest first (bounded): a close with unread bytes is a reset, not a 413.
            while more and read <= DRAIN_MAX:
                message = await next_message()
                if message is None or message["type"] == "http.disconnect":
                    break
                read += len(message.get("body", b""))
                more = message.get("more_body", False)
            await _refuse(send, 413, too_large)

        if declared is not None and not declared.isdigit():
            return await _refuse(send, 400, "the Content-Length header is not a number")
        if declared is not None and int(declared) > self.max_body:
            return await refuse_large(0, int(declared) <= DRAIN_MAX)
        chunks, size = [], 0
        while True:
            message = await next_message()
            if message is None:
                return await _refuse(send, 408, "the request body was not sent in time (the "
                                     f"client stalled for {self.idle:g} s, or took over "
                                     f"{self.total:g} s in all)")
            if message["type"] == "http.disconnect":
                # Nobody will read it, but the middleware above must see a response.
                return await _refuse(send, 400, "the client disconnected before the body ended")
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_body:
                return await refuse_large(size, message.get("more_body", False))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        delivered = False

        async def replay():
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: wait for the disconnect, as usual

        return await self.app(scope, replay, send)


async def _refuse(send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail, "errors": []}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


def timed_h11_protocol(header_timeout: float = HEADER_TIMEOUT):
    """uvicorn's h11 protocol class with a deadline on request headers (see module doc)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class TimedH11Protocol(H11Protocol):
        _header_timer = None

        def connection_made(self, transport):
            super().connection_made(transport)
            self._arm()

        def _arm(self):
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(header_timeout, self._expire)

        def _disarm(self):
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _expire(self):
            self._header_timer = None
            if self.conn.their_state in (h11.IDLE,) and not self.transport.is_closing():
                self.transport.close()  # headers still incomplete: drop the connection

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is h11.IDLE:
                self._arm()  # bytes of a request line/headers, not complete yet
            else:
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            # the next request's headers get their own deadline (keep-alive covers silence)

        def connection_lost(self, exc):
            self._disarm()
            super().connection_lost(exc)

    return TimedH11Protocol
