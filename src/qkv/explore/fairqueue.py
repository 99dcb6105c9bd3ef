"""Fair service for a classroom: the requests that take the cores wait in one bounded queue.

The heavy endpoints (live timings, far-back sweeps, recall answers, the GPT view's ablations
and generation, the model view, the seq2seq decoding and the measured curves) run at most
``workers`` at a time. Learners take turns: each turn serves the next learner in rotation (the
oldest of their waiting requests), and a learner has at most one request running, so one
learner's burst waits behind everyone else's next request instead of in front of it. A learner
has at most one waiting request per endpoint: a newer one takes the older one's place (dragging
a slider asks for the newest value only), and the older is answered 409 at once. Live timings
run alone — no other heavy request runs while they do — since two measurements at once time
each other; far-back reads run one at a time among themselves (memory: see ``SINGLE``).

What the server holds is bounded by the queue, not by the room: ``workers`` computations, and
at most ``max_waiting`` waiting requests (``per_learner`` each), each holding a body already
bounded by :mod:`qkv.explore.limits`. Beyond those a request is refused at once (429 for one
learner's excess, 503 when the whole queue is full), in words. ``GET /api/queue`` tells a
learner's page how many requests are ahead of each of theirs ("3 ahead of you").
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from .joincode import SCOPE_KEY

WORKERS = 2  # heavy computations at once (the target machine has 2 cores)
MAX_WAITING = 256  # waiting requests, the whole room
PER_LEARNER = 8  # waiting requests of one learner (one per endpoint: 8 covers a page's views)
QUEUE_PATH = "/api/queue"
HEAVY_PREFIXES = ("/api/gpt/", "/api/model/")
HEAVY = frozenset({"/api/cost/growth", "/api/cost/recall", "/api/cost/recall/curves",
                   "/api/farback", "/api/farback/curves", "/api/seq2seq",
                   "/api/seq2seq/curves"})
ALONE = frozenset({"/api/cost/growth"})  # live timings: nothing else heavy while they run
# One at a time among themselves: a far-back read of a new series sweeps it at every lag, and
# holds ~200 MB while it does; two at once would double the server's peak.
SINGLE = frozenset({"/api/farback"})


def is_heavy(path: str) -> bool:
    return path in HEAVY or path.startswith(HEAVY_PREFIXES)


@dataclass
class Ticket:
    learner: str
    path: str
    alone: bool
    arrived: float = field(default_factory=time.monotonic)
    turn: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop()
                                 .create_future())  # True: run now; False: replaced


class QueueFull(Exception):
    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


class FairQueue:
    """Turns for heavy requests: round-robin over learners, one running per learner."""

    def __init__(self, workers: int = WORKERS, max_waiting: int = MAX_WAITING,
                 per_learner: int = PER_LEARNER):
        self.workers, self.max_waiting, self.per_learner = workers, max_waiting, per_learner
        self.waiting: dict[str, OrderedDict[str, Ticket]] = {}  # learner → path → ticket
        self.rotation: deque[str] = deque()  # learners with waiting tickets, next turn first
        self.running: dict[str, int] = {}
        self.running_paths: dict[str, int] = {}
        self.running_total = 0
        self.alone_running = False
        # what the load test reports
        self.longest_wait = 0.0
        self.served = self.replaced = self.refused = 0
        self.most_waiting = 0

    def size(self) -> int:
        return sum(len(t) for t in self.waiting.values())

    def enter(self, learner: str, path: str) -> Ticket:
        """A ticket in the queue (replacing this learner's waiting one for ``path``), or
        QueueFull."""
        mine = self.waiting.get(learner)
        ticket = Ticket(learner, path, path in ALONE)
        if mine is not None and path in mine:
            old = mine[path]
            mine[path] = ticket  # the newer request keeps the older one's place
            ticket.arrived = old.arrived
            old.turn.set_result(False)
            self.replaced += 1
        else:
            if mine is not None and len(mine) >= self.per_learner:
                self.refused += 1
                raise QueueFull(429, f"you already have {len(mine)} requests waiting for the "
                                "machine; wait for their answers before asking for more")
            if self.size() >= self.max_waiting:
                self.refused += 1
                raise QueueFull(503, f"the machine is busy: {self.size()} requests of the "
                                "room are waiting; try again in a few seconds")
            if mine is None:
                mine = self.waiting[learner] = OrderedDict()
                self.rotation.append(learner)
            mine[path] = ticket
        self.most_waiting = max(self.most_waiting, self.size())
        self._dispatch()
        return ticket

    def withdraw(self, ticket: Ticket) -> None:
        """A waiting ticket whose client went away (or was cancelled) leaves the queue."""
        mine = self.waiting.get(ticket.learner)
        if mine is not None and mine.get(ticket.path) is ticket:
            del mine[ticket.path]
            if not mine:
                del self.waiting[ticket.learner]
                self.rotation.remove(ticket.learner)
        if not ticket.turn.done():
            ticket.turn.set_result(False)

    def leave(self, ticket: Ticket) -> None:
        """A running ticket is done: its slot goes to the next learner in turn."""
        self.running[ticket.learner] -= 1
        if not self.running[ticket.learner]:
            del self.running[ticket.learner]
        self.running_total -= 1
        self.running_paths[ticket.path] -= 1
        if ticket.alone:
            self.alone_running = False
        self._dispatch()

    def _next(self) -> Ticket | None:
        """The ticket whose turn it is: of the first learner in rotation who has none running,
        their oldest request that can run now (one whose kind is SINGLE and running waits,
        their request to another endpoint goes meanwhile); None if nobody's can."""
        for learner in self.rotation:
            if self.running.get(learner, 0) >= 1:
                continue
            for ticket in self.waiting[learner].values():
                if ticket.path in SINGLE and self.running_paths.get(ticket.path):
                    continue  # its kind is running: this learner's next, or the next learner
                if ticket.alone:  # a timing waits for the machine to empty; nothing jumps it
                    return ticket if not self.running_total else None
                return ticket
        return None

    def _dispatch(self) -> None:
        while self.rotation and self.running_total < self.workers and not self.alone_running:
            ticket = self._next()
            if ticket is None:
                return
            learner, path = ticket.learner, ticket.path
            mine = self.waiting[learner]
            del mine[path]
            self.rotation.remove(learner)
            if mine:
                self.rotation.append(learner)  # their next request: after everyone else's
            else:
                del self.waiting[learner]
            self.running[learner] = self.running.get(learner, 0) + 1
            self.running_total += 1
            self.running_paths[path] = self.running_paths.get(path, 0) + 1
            self.alone_running = ticket.alone
            self.longest_wait = max(self.longest_wait, time.monotonic() - ticket.arrived)
            self.served += 1
            ticket.turn.set_result(True)

    def ahead(self, learner: str) -> list[dict]:
        """Each of this learner's waiting requests and how many will be served before it:
        turns go round the learners, so in round r everyone with more than r waiting goes."""
        mine = self.waiting.get(learner)
        if not mine:
            return []
        order = list(self.rotation)
        me = order.index(learner)
        said = []
        for j, path in enumerate(mine):
            others = sum(min(len(self.waiting[m]), j + 1 if k < me else j)
                         for k, m in enumerate(order) if m != learner)
            said.append({"path": path, "ahead": others + j + self.running_total})
        return said

    def stats(self) -> dict:
        return {"workers": self.workers, "running": self.running_total,
                "waiting": self.size(), "most_waiting": self.most_waiting,
                "longest_wait_seconds": round(self.longest_wait, 3), "served": self.served,
                "replaced": self.replaced, "refused": self.refused}


def learner_of(scope) -> str:
    """The learner a request is from: the join cookie's id, else the client's address."""
    return scope.get(SCOPE_KEY) or (scope.get("client") or ("unknown",))[0]


class FairService:
    """ASGI middleware: heavy requests wait their turn in a :class:`FairQueue`; ``GET
    /api/queue`` answers the learner's positions (and the queue's figures)."""

    def __init__(self, app, queue: FairQueue):
        self.app, self.queue = app, queue

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        if path == QUEUE_PATH and scope["method"] == "GET":
            return await _json(send, 200, {"classroom": True,
                                           "waiting": self.queue.ahead(learner_of(scope)),
                                           "queue": self.queue.stats()})
        if scope["method"] != "POST" or not is_heavy(path):
            return await self.app(scope, receive, send)
        try:
            ticket = self.queue.enter(learner_of(scope), path)
        except QueueFull as full:
            return await _json(send, full.status, {"detail": full.detail, "errors": []},
                               [(b"retry-after", b"5")])
        # The body is read now (it is already in memory: BodyLimits read it), so that while
        # waiting the next receive() says whether the client went away.
        first = await receive()
        gone = asyncio.ensure_future(receive())
        try:
            await asyncio.wait([ticket.turn, gone], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            gone.cancel()
            if ticket.turn.done() and ticket.turn.result():
                self.queue.leave(ticket)  # its turn came just as it was cancelled
            else:
                self.queue.withdraw(ticket)
            raise
        if not ticket.turn.done():  # the client disconnected while waiting
            self.queue.withdraw(ticket)
            # nobody reads it, but the middleware above must see a response (see limits.py)
            return await _json(send, 400, {"detail": "the client went away while waiting",
                                           "errors": []})
        if not ticket.turn.result():
            gone.cancel()
            return await _json(send, 409, {
                "detail": "replaced by a newer request of yours to the same view",
                "errors": [], "replaced": True})
        delivered = False

        async def replay():
            nonlocal delivered
            if not delivered:
                delivered = True
                return first
            return await gone

        try:
            return await self.app(scope, replay, send)
        finally:
            gone.cancel()
            self.queue.leave(ticket)


async def _json(send, status: int, content: dict, extra=()) -> None:
    body = json.dumps(content).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *extra]})
    await send({"type": "http.response.body", "body": body})
