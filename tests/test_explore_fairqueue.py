"""The classroom's queue of heavy requests: turns go round the learners, a newer request takes
an older waiting one's place, live timings run alone, the queue is bounded, and a waiting
learner is told how many are ahead (qkv.explore.fairqueue). In-process: no sockets at all."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from qkv.explore import create_app
from qkv.explore.classroom import Classroom
from qkv.explore.fairqueue import FairQueue, QueueFull, is_heavy
from qkv.explore.joincode import Guesses


def started(tickets) -> list[str]:
    return [f"{t.learner}{t.path}" for t in tickets if t.turn.done() and t.turn.result()]


def finish(queue: FairQueue, ticket) -> None:
    queue.leave(ticket)


def test_turns_go_round_the_learners_so_a_burst_waits_behind_the_others():
    async def run():
        q = FairQueue(workers=1)
        a = [q.enter("a", f"/api/gpt/{i}") for i in range(4)]  # a's burst comes first
        b = q.enter("b", "/api/farback")
        c = q.enter("c", "/api/farback")
        order = []
        running = a[0]
        for _ in range(6):
            order.append(f"{running.learner}{running.path}")
            finish(q, running)
            waiting = [t for t in (*a, b, c) if t.turn.done() and t.turn.result()
                       and f"{t.learner}{t.path}" not in order]
            if not waiting:
                break
            assert len(waiting) == 1  # one worker: one at a time
            running = waiting[0]
        return order

    order = asyncio.run(run())
    # round robin: a was in line (with its next request) before b and c came; then one each
    assert order == ["a/api/gpt/0", "a/api/gpt/1", "b/api/farback", "c/api/farback",
                     "a/api/gpt/2", "a/api/gpt/3"]


def test_a_newer_request_takes_the_older_ones_place_and_the_older_is_answered():
    async def run():
        q = FairQueue(workers=1)
        busy = q.enter("b", "/api/farback")  # runs
        first = q.enter("a", "/api/farback")
        other = q.enter("c", "/api/farback")
        newer = q.enter("a", "/api/farback")  # the slider moved on
        assert first.turn.done() and first.turn.result() is False
        assert q.replaced == 1 and q.size() == 2
        finish(q, busy)
        assert started([newer, other]) == ["a/api/farback"]  # it kept a's place, before c
        return q.stats()

    assert asyncio.run(run())["replaced"] == 1


def test_a_live_timing_runs_alone_and_nothing_jumps_it():
    async def run():
        q = FairQueue(workers=2)
        x = q.enter("x", "/api/farback")
        timing = q.enter("a", "/api/cost/growth")
        later = q.enter("b", "/api/farback")
        assert started([x, timing, later]) == ["x/api/farback"]  # a free worker stays free
        finish(q, x)
        assert started([timing, later]) == ["a/api/cost/growth"]
        finish(q, timing)
        assert started([later]) == ["b/api/farback"]

    asyncio.run(run())


def test_the_queue_is_bounded_per_learner_and_for_the_room():
    async def run():
        q = FairQueue(workers=1, max_waiting=5, per_learner=2)
        q.enter("a", "/api/gpt/0")  # runs
        q.enter("a", "/api/gpt/1")
        q.enter("a", "/api/gpt/2")
        with pytest.raises(QueueFull) as mine:
            q.enter("a", "/api/gpt/3")
        assert mine.value.status == 429 and "2 requests waiting" in mine.value.detail
        for learner in "bcd":
            q.enter(learner, "/api/farback")
        with pytest.raises(QueueFull) as room:
            q.enter("e", "/api/farback")
        assert room.value.status == 503 and "busy" in room.value.detail
        assert q.enter("a", "/api/gpt/1").learner == "a"  # a replacement needs no new room

    asyncio.run(run())


def test_each_waiting_request_knows_how_many_are_ahead():
    async def run():
        q = FairQueue(workers=1)
        q.enter("a", "/api/gpt/0")  # runs
        q.enter("a", "/api/gpt/1")
        q.enter("b", "/api/farback")
        q.enter("c", "/api/farback")
        q.enter("c", "/api/gpt/0")
        return q.ahead("a"), q.ahead("b"), q.ahead("c"), q.ahead("nobody")

    a, b, c, nobody = asyncio.run(run())
    # rotation a, b, c after a's running one: a1 (1 running ahead), b, c, then c's second
    assert a == [{"path": "/api/gpt/1", "ahead": 1}]
    assert b == [{"path": "/api/farback", "ahead": 2}]
    assert c == [{"path": "/api/farback", "ahead": 3}, {"path": "/api/gpt/0", "ahead": 4}]
    assert nobody == []


def test_which_endpoints_wait_their_turn():
    for path in ("/api/cost/growth", "/api/farback", "/api/cost/recall", "/api/gpt/predict",
                 "/api/gpt/circuit", "/api/model/attentions", "/api/seq2seq"):
        assert is_heavy(path), path
    for path in ("/api/scale", "/api/trace", "/api/mask", "/api/mistakes", "/api/cost",
                 "/api/projections", "/api/queue"):
        assert not is_heavy(path), path


SLOW = 0.15  # seconds each test request computes


def slow_app():
    """A classroom app with slow heavy endpoints (/api/gpt/slow/*) that say who asked."""
    room = Classroom(code="ABC234", queue=FairQueue(workers=1), guesses=Guesses(first=0.0))
    app = create_app(allowed_hosts=["testserver"], classroom=room)

    @app.post("/api/gpt/slow/{n}")
    def slow(n: int, body: dict) -> dict:
        time.sleep(SLOW)
        return {"n": n, "who": body.get("who"), "done": time.monotonic()}

    return app, room


async def learner(app, name: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(f"10.0.0.{ord(name[0])}", 4000))
    c = httpx.AsyncClient(transport=transport, base_url="http://testserver", timeout=30,
                          follow_redirects=True)
    assert (await c.get("/api/health?join=abc234")).status_code == 200
    return c


def test_through_the_server_a_burst_does_not_starve_another_learner():
    app, room = slow_app()

    async def run():
        a, b = await learner(app, "a"), await learner(app, "b")
        burst = [asyncio.create_task(a.post(f"/api/gpt/slow/{i}", json={"who": "a"}))
                 for i in range(4)]
        await asyncio.sleep(SLOW / 3)  # b asks once, after a's whole burst arrived
        mine = asyncio.create_task(b.post("/api/gpt/slow/9", json={"who": "b"}))
        await asyncio.sleep(SLOW / 3)
        told = (await b.get("/api/queue")).json()["waiting"]
        answers = [r.json() for r in await asyncio.gather(*burst, mine)]
        await a.aclose()
        await b.aclose()
        return told, answers

    told, answers = asyncio.run(run())
    assert told == [{"path": "/api/gpt/slow/9", "ahead": 2}]  # a's running one, then a's next
    done = sorted(answers, key=lambda r: r["done"])
    assert [r["who"] for r in done] == ["a", "a", "b", "a", "a"]
    assert room.queue.stats()["served"] == 5 and room.queue.longest_wait < 6 * SLOW


def test_through_the_server_a_newer_request_replaces_a_waiting_one_with_a_409():
    app, room = slow_app()

    async def run():
        a, b = await learner(app, "a"), await learner(app, "b")
        running = asyncio.create_task(b.post("/api/gpt/slow/0", json={"who": "b"}))
        await asyncio.sleep(SLOW / 3)
        old = asyncio.create_task(a.post("/api/gpt/slow/1", json={"who": "a-old"}))
        await asyncio.sleep(SLOW / 3)
        new = asyncio.create_task(a.post("/api/gpt/slow/1", json={"who": "a-new"}))
        got = await asyncio.gather(running, old, new)
        await a.aclose()
        await b.aclose()
        return got

    running, old, new = asyncio.run(run())
    assert running.status_code == 200 and new.status_code == 200
    assert new.json()["who"] == "a-new"
    assert old.status_code == 409 and old.json()["replaced"] is True
    assert room.queue.stats()["replaced"] == 1


def test_a_timing_says_when_other_programs_kept_the_machine_busy():
    import subprocess
    import sys

    from qkv.explore.machine_busy import OtherWork

    burn = "import time\nt = time.perf_counter()\nwhile time.perf_counter() - t < 0.6: pass\n"
    with OtherWork() as other:
        child = subprocess.Popen([sys.executable, "-c", burn])
        child.wait(timeout=30)
    assert other.cores is not None and other.cores > 0.5  # the child's core, at least
    assert "busy" in other.said()
    other.cores = 0.1
    assert other.said() is None


def test_far_back_reads_run_one_at_a_time_and_others_use_the_free_worker():
    async def run():
        q = FairQueue(workers=2)
        a = q.enter("a", "/api/farback")
        b = q.enter("b", "/api/farback")  # its kind is running: it waits ...
        c = q.enter("c", "/api/gpt/predict")  # ... and c's request takes the free worker
        assert started([a, b, c]) == ["a/api/farback", "c/api/gpt/predict"]
        finish(q, a)
        assert started([b]) == ["b/api/farback"]

    asyncio.run(run())


def test_a_learner_waiting_for_a_far_back_read_gets_their_other_request_meanwhile():
    async def run():
        q = FairQueue(workers=2)
        a = q.enter("a", "/api/farback")
        b_read = q.enter("b", "/api/farback")
        b_curves = q.enter("b", "/api/farback/curves")  # cached and quick: no need to wait
        assert started([a, b_read, b_curves]) == ["a/api/farback", "b/api/farback/curves"]
        finish(q, b_curves)
        finish(q, a)
        assert started([b_read]) == ["b/api/farback"]

    asyncio.run(run())


def test_a_server_without_a_classroom_says_so_at_the_queue_path():
    # the page polls /api/queue while a request takes long; outside a classroom a 404 there was
    # a console error in every browser test whose request took over 400 ms
    async def ask(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            return await c.get("/api/queue")

    alone = asyncio.run(ask(create_app()))
    assert alone.status_code == 200 and alone.json() == {"classroom": False, "waiting": []}
