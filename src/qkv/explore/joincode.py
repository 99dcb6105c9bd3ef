"""A classroom's join code: nothing is answered until a learner has shown it once.

``qkv explore --classroom`` makes a short random code and prints a URL carrying it
(``http://ADDRESS:PORT/?join=K7P4QX``). :class:`JoinGate` (ASGI middleware) answers a request
with the right ``join`` parameter by a cookie and a redirect to the same address without the
code (so it leaves the address bar, the history and any later log line); every later request
carries the cookie. The cookie holds a random learner id signed with a per-server secret, not
the code: it names the learner for the fair queue (:mod:`qkv.explore.fairqueue`) and cannot be
forged without the secret. A restarted server has a new code and secret, so learners join again.

Without the cookie: a page (or, under /api/, a JSON error) saying how to join. A wrong code, or
a cookie this server did not sign, is a guess: each address's guesses are answered one at a
time, each later than the one before (:class:`Guesses`), so guessing is slowed, never sped up
by sending many at once. :class:`RedactJoinCode` keeps the code out of every log line.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import html
import json
import logging
import re
import secrets
import time
from collections import OrderedDict
from urllib.parse import parse_qsl, quote, urlencode

# No 0/O, 1/I/L: a code read off a projector is typed without confusing them.
ALPHABET = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"
CODE_LENGTH = 6  # 31⁶ ≈ 887 million codes; guesses are throttled per address (Guesses)
PARAM = "join"
COOKIE = "qkv_learner"
SCOPE_KEY = "qkv.learner"  # where the gate leaves the learner's id for the app and the queue

FIRST_DELAY = 0.5  # seconds before answering an address's first wrong guess ...
MAX_DELAY = 8.0  # ... doubling with each later one, up to this
FORGET_AFTER = 600.0  # seconds without a wrong guess before an address starts afresh
MAX_ADDRESSES = 4096  # addresses remembered (oldest forgotten first): memory stays bounded
MAX_WAITING_GUESSES = 4  # guesses of one address waiting their turn; more are refused at once


def new_code() -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))


class Guesses:
    """Wrong guesses per client address: how long to wait before answering the next one."""

    def __init__(self, first: float = FIRST_DELAY, most: float = MAX_DELAY,
                 forget_after: float = FORGET_AFTER, max_addresses: int = MAX_ADDRESSES):
        self.first, self.most, self.forget_after = first, most, forget_after
        self.max_addresses = max_addresses
        self._seen: OrderedDict[str, tuple[int, float]] = OrderedDict()  # address → (n, last)
        self._turns: dict[str, asyncio.Lock] = {}
        self._waiting: dict[str, int] = {}

    def count(self, address: str) -> int:
        n, last = self._seen.get(address, (0, 0.0))
        return 0 if time.monotonic() - last > self.forget_after else n

    def delay(self, address: str) -> float:
        """Seconds to wait before answering this address's next wrong guess."""
        n = self.count(address)
        return min(self.first * 2 ** n, self.most)

    def record(self, address: str) -> None:
        self._seen[address] = (self.count(address) + 1, time.monotonic())
        self._seen.move_to_end(address)
        while len(self._seen) > self.max_addresses:
            self._seen.popitem(last=False)

    async def slow_down(self, address: str) -> bool:
        """Wait this address's turn, then its delay; False (at once) when too many of its
        guesses already wait: the caller refuses those without looking at them."""
        if self._waiting.get(address, 0) >= MAX_WAITING_GUESSES:
            return False
        self._waiting[address] = self._waiting.get(address, 0) + 1
        try:
            lock = self._turns.setdefault(address, asyncio.Lock())
            async with lock:  # one guess of an address at a time: parallel ones queue here
                await asyncio.sleep(self.delay(address))
                self.record(address)
        finally:
            self._waiting[address] -= 1
            if not self._waiting[address]:
                del self._waiting[address], self._turns[address]
        return True


class JoinGate:
    """ASGI middleware: only learners who have shown the join code (once) are answered."""

    def __init__(self, app, code: str, guesses: Guesses | None = None):
        self.app = app
        self.code = code.upper()
        self.secret = secrets.token_bytes(32)
        self.guesses = guesses or Guesses()

    def _sign(self, learner: str) -> str:
        return hmac.new(self.secret, learner.encode(), hashlib.sha256).hexdigest()[:32]

    def new_cookie(self) -> str:
        learner = secrets.token_hex(8)
        return f"{learner}.{self._sign(learner)}"

    def learner_of(self, cookie: str) -> str | None:
        """The learner id a cookie value carries, if this server signed it."""
        learner, _, mac = cookie.partition(".")
        return learner if learner and hmac.compare_digest(mac, self._sign(learner)) else None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        cookie = _cookie(headers.get(b"cookie", b"").decode("latin-1"), COOKIE)
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"),
                          keep_blank_values=True)
        shown = [v for k, v in query if k == PARAM]
        address = (scope.get("client") or ("unknown",))[0]
        learner = self.learner_of(cookie) if cookie else None
        if shown:
            if hmac.compare_digest(shown[-1].strip().upper().encode(), self.code.encode()):
                # the code's address without the code: it leaves the address bar and history
                rest = urlencode([(k, v) for k, v in query if k != PARAM])
                where = quote(scope.get("root_path", "") + scope["path"])
                where += f"?{rest}" if rest else ""
                value = cookie if learner else self.new_cookie()
                return await _answer(send, 303, b"", "text/plain", [
                    (b"location", where.encode()),
                    (b"set-cookie", f"{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict"
                                    .encode())])
            return await self._wrong(scope, send, address, "that join code is not this "
                                     "classroom's")
        if learner is not None:
            scope[SCOPE_KEY] = learner
            return await self.app(scope, receive, send)
        if cookie:  # a cookie from an earlier run of the server, or a forged one
            return await self._wrong(scope, send, address, "the classroom's server was "
                                     "restarted (or this browser's cookie is not its own)")
        return await _how_to_join(scope, send, 401, "this explorer is a classroom's: join it "
                                  "first")

    async def _wrong(self, scope, send, address: str, why: str) -> None:
        if not await self.guesses.slow_down(address):
            return await _how_to_join(scope, send, 429, "too many join attempts from this "
                                      "address at once; wait a few seconds, then try once")
        return await _how_to_join(scope, send, 403, why)


def _cookie(header: str, name: str) -> str:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return ""


HOW = ("open the address your teacher shows (it ends in ?join= and a code of "
       f"{CODE_LENGTH} letters and digits), or scan the QR code in their terminal")

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>qkv explore: join the classroom</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body><main><h1>Join the classroom</h1><p>{why}.</p>
<p>To join, {how}. The code is asked once: this browser then stays in the classroom until the
teacher restarts the explorer.</p></main></body></html>
"""


async def _how_to_join(scope, send, status: int, why: str) -> None:
    """The page (or, under /api/, the JSON error) that says how to join."""
    if scope["path"].startswith("/api/"):
        body = json.dumps({"detail": f"{why}: to join, {HOW}", "errors": []}).encode()
        return await _answer(send, status, body, "application/json")
    body = PAGE.format(why=html.escape(why[:1].upper() + why[1:]), how=html.escape(HOW))
    return await _answer(send, status, body.encode(), "text/html; charset=utf-8")


async def _answer(send, status: int, body: bytes, kind: str, extra=()) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", kind.encode()),
                            (b"content-length", str(len(body)).encode()), *extra]})
    await send({"type": "http.response.body", "body": body})


class RedactJoinCode(logging.Filter):
    """Rewrites a log record so neither the code nor any ``join=`` value appears in it (a
    wrong guess is someone's attempt at the code: it stays out of the log too)."""

    PATTERN = re.compile(r"(\bjoin=)[^&\s\"']*", re.IGNORECASE)

    def __init__(self, code: str):
        super().__init__()
        self.code = re.compile(re.escape(code), re.IGNORECASE)

    def _clean(self, value):
        if isinstance(value, str):
            return self.code.sub("…", self.PATTERN.sub(r"\1…", value))
        return value

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = self._clean(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(self._clean(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: self._clean(v) for k, v in record.args.items()}
        return True


LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "qkv")


def redact_logs(code: str) -> RedactJoinCode:
    """Install the redaction on the server's loggers (after uvicorn configured them)."""
    redact = RedactJoinCode(code)
    for name in LOGGERS:
        logging.getLogger(name).addFilter(redact)
    return redact
