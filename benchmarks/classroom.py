"""A classroom on one machine: N simulated learners on one `qkv explore --classroom`, measured.

    python benchmarks/classroom.py                      # 30 learners, 5 minutes (the issue's)
    python benchmarks/classroom.py --learners 8 --seconds 60 --think 1
    python benchmarks/classroom.py --views vectors,scale,farback --json /tmp/room.json

The server is started here, on loopback only (``--host 127.0.0.1`` stands for the LAN address
--classroom would find), and stopped at the end. Each learner joins with the code, loads the
page, then walks the views in the lesson's order with the requests the page itself makes
(the bodies of static/views/*.js; a slider drag is a series of requests, one after another,
as the page's Channel sends them), thinking between steps, with inputs of its own. One
misbehaving client bursts heavy requests, sends bodies too large and bodies too slow, and
guesses join codes. A "teacher" walks the lesson once before the room comes in, so the idle
size is the server's with every model loaded.

Printed: per endpoint p50/p95/p99/max latency of the well-behaved learners, their errors
(no answer) and answers by status (5xx apart); the queue's figures (longest wait of a heavy
request, most waiting at once, replaced and refused); what the misbehaving client got; the
server's RSS idle and at peak; and whether every learner's answers were their own — each
kept answer is compared with qkv called directly (qkv.explain for the vectors view) or with a
fresh in-process app given the same request alone. Bounded: the learners stop starting steps
at the end of the run, and whatever is still running is cancelled ``GRACE`` seconds later.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import queue
import random
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import httpx

READY = "qkv explore: serving on "
START_TIMEOUT = 120.0
GRACE = 120.0  # seconds after the run's end before unfinished requests are cancelled
REQUEST_TIMEOUT = 180.0
KEEP = 3  # answers kept per learner and endpoint for the own-answers check
LIGHT = ("/api/trace", "/api/scale", "/api/mask", "/api/mistakes", "/api/projections",
         "/api/cost")
FIXED = ("/api/colors", "/api/projections/learned")
VIEWS = ("projections", "vectors", "scale", "masks", "mistakes", "cost", "seq2seq", "farback",
         "model", "gpt")
NAMES = ("ROMEO", "JULIET", "MERCUTIO", "TYBALT", "BENVOLIO", "NURSE", "CAPULET", "PARIS")


# -- the server --------------------------------------------------------------------------------
class Server:
    """`qkv explore --classroom` on 127.0.0.1, its URL, join code and process."""

    def __init__(self, python: str = sys.executable):
        cmd = [python, "-m", "qkv", "explore", "--classroom", "--host", "127.0.0.1",
               "--port", "0", "--no-browser"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        lines: queue.Queue[str] = queue.Queue()
        self.lines = lines  # what the server prints after its banner: its log
        threading.Thread(target=lambda: [lines.put(x) for x in self.proc.stdout],
                         daemon=True).start()
        seen, deadline = [], time.monotonic() + START_TIMEOUT
        while not seen or not seen[-1].startswith(READY):
            try:
                seen.append(lines.get(timeout=max(0.1, deadline - time.monotonic())))
            except queue.Empty:
                self.stop()
                raise SystemExit(f"qkv explore did not start: {''.join(seen)}") from None
        self.url = seen[-1][len(READY):].strip().rstrip("/")
        self.code = "".join(seen).split("join code ", 1)[1].split()[0]
        if not self.url.startswith("http://127.0.0.1:"):
            self.stop()
            raise SystemExit(f"the server is not on loopback ({self.url}): refusing to load it")

    def rss(self, field: str = "VmRSS") -> int:
        """The server's resident size (VmRSS) or its peak so far (VmHWM), in bytes."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        raise RuntimeError(f"no {field} for the server process")

    def stop(self) -> list[str]:
        """Stop the server; the lines it printed after its banner (warnings, tracebacks)."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        time.sleep(0.2)  # the reader thread takes the last lines
        log = []
        while not self.lines.empty():
            log.append(self.lines.get().rstrip())
        return log


# -- what the page asks, view by view -----------------------------------------------------------
def lesson(rng: random.Random, who: int, lap: int, views: tuple[str, ...]) -> list[list]:
    """The learner's walk: steps, each a list of (path, body) the page sends at once; a step
    of one request repeated with small changes is a drag (sent one after another)."""
    r = lambda lo, hi: round(rng.uniform(lo, hi), 2)  # noqa: E731
    tag = who + 1 + lap / 10  # makes every learner's inputs their own
    steps = []
    if "projections" in views:
        steps.append([("/api/projections", {"query": 0})])
        steps.append([("/api/projections", {"w_q": [[1, 0], [0, r(0.2, 2)]],
                                            "w_k": [[r(0.2, 2), 0], [0, 1]], "query": 1})])
    if "vectors" in views:
        keys = [[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]]
        drag = [("/api/trace", {"queries": [[tag, r(-1, 1)]], "keys": keys,
                                "values": [[2.0, 0.0], [0.0, 2.0], [1.0, 1.0]]})
                for _ in range(6)]
        steps.append(drag)
    if "scale" in views:
        steps.append([("/api/scale", {"scores": [8.0, 0.0], "d_k": d, "temperature": tau,
                                      "seed": 0, "n_keys": 16})
                      for d, tau in ((1, 1.0), (8, 1.0), (64, 1.0), (64, r(0.2, 3)),
                                     (1024, 1.0))])
    if "masks" in views:
        steps.append([("/api/mask", {"tokens": ["the", "cat", f"L{who}", ".", "a", "dog"],
                                     "mask": {"presets": presets, "overrides": []},
                                     "seed": who, "uniform": False})
                      for presets in ([], [{"kind": "causal"}])])
    if "mistakes" in views:
        steps.append([("/api/mistakes", {"wrong_scale": s, "wrong_axis": a, "swap_kv": False})
                      for s, a in ((False, False), (True, False), (False, True))])
    if "cost" in views:
        steps.append([("/api/cost", {"n": 4096, "mask": "causal"}),
                      ("/api/cost/recall/curves", {}),
                      ("/api/cost/recall", {"seed": who, "n_pairs": 1})])
        steps.append([("/api/cost/growth", {"max_n": 2048, "repeats": 3})])
        steps.append([("/api/cost/recall", {"seed": who * 7 + lap, "n_pairs": n})
                      for n in (2, 4, 8)])
    if "seq2seq" in views:
        word = "".join(rng.choice("abcdefghijklmnop") for _ in range(12 + who % 20))
        steps.append([("/api/seq2seq", {"input": word}), ("/api/seq2seq/curves", {})])
    if "farback" in views:
        seed = 1000 + who * 10 + lap
        steps.append([("/api/farback", {"seed": seed}), ("/api/farback/curves", {})])
        steps.append([("/api/farback", {"seed": seed, "event_lag": lag})  # the lag slider
                      for lag in sorted(rng.sample(range(8, 250), 4))])
    if "model" in views:
        sentence = f"The cat sat on the mat because learner {who} was tired."
        steps.append([("/api/model/attentions", {"sentence": sentence}),
                      ("/api/model/neuron", {"sentence": sentence, "layer": 0, "head": 0,
                                             "token": 1})])
        steps.append([("/api/model/neuron", {"sentence": sentence, "layer": layer,
                                             "head": head, "token": 2})
                      for layer, head in ((1, 3), (4, 7))])
    if "gpt" in views:
        prompt = f"{NAMES[who % len(NAMES)]}.\nI will not {'go' * (1 + who % 3)}"
        steps.append([("/api/gpt/predict", {"prompt": prompt, "temperature": 1.0,
                                            "ablate": [], "ablation": "zero"}),
                      ("/api/gpt/roles", {}), ("/api/gpt/induction", {})])
        steps.append([("/api/gpt/predict", {"prompt": prompt, "temperature": 1.0,
                                            "ablate": [{"layer": who % 4, "head": h}],
                                            "ablation": "zero"}) for h in (0, 1)])
        steps.append([("/api/gpt/where", {"layer": who % 4, "head": lap % 4,
                                          "ablation": "zero"}),
                      ("/api/gpt/generate", {"prompt": prompt, "steps": 8,
                                             "temperature": 1.0, "seed": who})])
    return steps


def by_endpoint(step: list) -> list[list]:
    """A step's requests grouped by endpoint. The page sends different endpoints at once, but
    one endpoint's requests one after another (its Channel: a slider drag, a control changed
    in turn, asks again when the last answer is in)."""
    groups: dict[str, list] = {}
    for path, body in step:
        groups.setdefault(path, []).append((path, body))
    return list(groups.values())


# -- measuring ---------------------------------------------------------------------------------
class Record:
    def __init__(self):
        self.seconds = defaultdict(list)  # path → latencies of answered requests
        self.status = defaultdict(lambda: defaultdict(int))  # path → status → count
        self.errors = defaultdict(list)  # path → what went wrong (no answer)
        self.kept = defaultdict(list)  # (learner, path) → [(body, answer)]

    def add(self, who, path, body, seconds, status, answer) -> None:
        self.seconds[path].append(seconds)
        self.status[path][status] += 1
        if status == 200 and len(self.kept[(who, path)]) < KEEP:
            self.kept[(who, path)].append((body, answer))


async def ask(client, record: Record, who, path: str, body) -> None:
    t0 = time.perf_counter()
    try:
        if body is None:
            r = await client.get(path)
            answer = None
        else:
            r = await client.post(path, json=body)
            answer = r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError) as exc:
        record.errors[path].append(f"{type(exc).__name__}: {exc}"[:200])
        return
    record.add(who, path, body, time.perf_counter() - t0, r.status_code, answer)


async def join(url: str, code: str) -> httpx.AsyncClient:
    # a browser: its own cookie jar, up to 6 connections kept alive — each for less than the
    # server's 5 s (a browser retries a request the server's idle close raced; httpx does not)
    client = httpx.AsyncClient(base_url=url, timeout=REQUEST_TIMEOUT, follow_redirects=True,
                               limits=httpx.Limits(max_connections=6, keepalive_expiry=4.0))
    r = await client.get(f"/?join={code}")
    if r.status_code != 200:
        raise RuntimeError(f"joining failed: {r.status_code} {r.text[:200]}")
    return client


async def learner(who: int, url: str, code: str, views, think: float, until: float,
                  record: Record, seed: int) -> None:
    rng = random.Random(seed * 1000 + who)
    await asyncio.sleep(rng.uniform(0, min(think * 2, 10)))  # the room does not arrive at once
    t0 = time.perf_counter()
    try:
        client = await join(url, code)
    except (httpx.HTTPError, RuntimeError) as exc:
        record.errors["/?join="].append(f"{type(exc).__name__}: {exc} (after "
                                        f"{time.perf_counter() - t0:.1f} s)"[:200])
        return
    try:
        for path in ("/static/main.js", "/static/style.css", "/api/colors",
                     "/api/projections/learned"):
            await ask(client, record, who, path, None)
        lap = 0
        while time.monotonic() < until:
            for step in lesson(rng, who, lap, views):
                if time.monotonic() >= until:
                    break
                async def in_turn(group):
                    for path, body in group:
                        await ask(client, record, who, path, body)
                        if len(group) > 1:
                            await asyncio.sleep(rng.uniform(0.05, 0.3))  # the drag goes on

                await asyncio.gather(*(in_turn(g) for g in by_endpoint(step)))
                await asyncio.sleep(rng.expovariate(1 / think) if think > 0 else 0)
            lap += 1
    finally:
        await client.aclose()


async def misbehave(url: str, code: str, until: float, seen: dict) -> None:
    """Bursts of heavy requests, bodies too large, bodies too slow, wrong join codes."""
    host, port = url.split("//", 1)[1].split(":")
    client = await join(url, code)
    slow = []

    def count(kind, status):
        seen[kind][status] = seen[kind].get(status, 0) + 1

    async def slow_body():
        t0 = time.perf_counter()
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            cookie = "; ".join(f"{k}={v}" for k, v in client.cookies.items())
            writer.write(f"POST /api/trace HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                         f"Cookie: {cookie}\r\nContent-Type: application/json\r\n"
                         "Content-Length: 400\r\n\r\n{".encode())
            await writer.drain()
            head = await asyncio.wait_for(reader.readline(), timeout=60)
            status = int(head.split()[1]) if head else 0
            count("slow body", status)
            seen.setdefault("slow body seconds", []).append(round(time.perf_counter() - t0, 1))
        except (OSError, TimeoutError, ValueError, IndexError) as exc:
            count("slow body", type(exc).__name__)
        finally:
            writer.close()

    try:
        cycle = 0
        while time.monotonic() < until:
            cycle += 1
            burst = [("/api/farback", {"seed": 7, "event_lag": lag}) for lag in range(10, 130, 10)]
            burst += [("/api/gpt/where", {"layer": 1, "head": h, "ablation": "zero"})
                      for h in range(4)]
            burst += [("/api/cost/growth", {"max_n": 2048, "repeats": 3})] * 3
            rs = await asyncio.gather(*(client.post(p, json=b) for p, b in burst),
                                      return_exceptions=True)
            for r in rs:
                count("burst", r.status_code if isinstance(r, httpx.Response)
                      else type(r).__name__)
            big = b'{"queries": [[' + b"1.0, " * 600_000 + b'1.0]]}'  # 3 MB
            try:
                r = await client.post("/api/trace", content=big,
                                      headers={"Content-Type": "application/json"})
                count("huge body", r.status_code)
            except httpx.HTTPError as exc:
                count("huge body", type(exc).__name__)
            slow.append(asyncio.create_task(slow_body()))
            async with httpx.AsyncClient(base_url=url, timeout=60) as stranger:
                t0 = time.perf_counter()
                rs = await asyncio.gather(*(stranger.get(f"/?join=WRONG{cycle}{i}")
                                            for i in range(6)), return_exceptions=True)
                for r in rs:
                    count("wrong code", r.status_code if isinstance(r, httpx.Response)
                          else type(r).__name__)
                seen.setdefault("wrong codes seconds", []).append(
                    round(time.perf_counter() - t0, 1))
            await asyncio.sleep(min(10.0, max(0.0, until - time.monotonic())))
        await asyncio.gather(*slow)
    finally:
        for task in slow:
            task.cancel()
        await client.aclose()


async def room(server: Server, args, record: Record, misbehaved: dict) -> dict:
    views = tuple(args.views)
    # the teacher first: every model loaded before the room comes in (the idle size)
    teacher = Record()
    client = await join(server.url, server.code)
    for step in lesson(random.Random(0), 0, 0, views):
        for group in by_endpoint(step):
            for path, body in group:
                await ask(client, teacher, -1, path, body)
    await client.aclose()
    unavailable = sorted(p for p, s in teacher.status.items() if 503 in s)
    await asyncio.sleep(2.0)
    idle = server.rss()
    until = time.monotonic() + args.seconds
    peak = {"rss": idle}

    lag = {"max": 0.0}

    async def watch():
        # the server's size, and this process's own loop lag: a client that is itself starved
        # of CPU measures its own delay into every latency (and opens connections late)
        while True:
            peak["rss"] = max(peak["rss"], server.rss())
            t = time.perf_counter()
            await asyncio.sleep(0.1)
            lag["max"] = max(lag["max"], time.perf_counter() - t - 0.1)

    watcher = asyncio.create_task(watch())
    tasks = [asyncio.create_task(learner(i, server.url, server.code, views, args.think,
                                         until, record, args.seed))
             for i in range(args.learners)]
    if not args.no_misbehaver:
        tasks.append(asyncio.create_task(misbehave(server.url, server.code, until, misbehaved)))
    t0 = time.monotonic()
    done, pending = await asyncio.wait(tasks, timeout=args.seconds + GRACE)
    for task in pending:
        task.cancel()
    failures = [repr(t.exception()) for t in done if t.exception() is not None]
    elapsed = time.monotonic() - t0
    watcher.cancel()
    client = await join(server.url, server.code)
    stats = (await client.get("/api/queue")).json()["queue"]
    await client.aclose()
    return {"idle_rss": idle, "peak_rss": max(peak["rss"], server.rss("VmHWM")),
            "queue": stats, "elapsed": elapsed, "unfinished": len(pending),
            "client_loop_lag_max": round(lag["max"], 3),
            "task_failures": failures, "unavailable": unavailable,
            "teacher_status": {p: dict(s) for p, s in teacher.status.items()}}


# -- own answers -------------------------------------------------------------------------------
def close(a, b, tol: float = 1e-6) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k], tol) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y, tol) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        return math.isclose(a, b, rel_tol=tol, abs_tol=tol) or (math.isnan(a) and math.isnan(b))
    return a == b


def reference(views: tuple[str, ...]):
    """A fresh app in this process, every view asked once now, as the server was: both import
    qkv's code at the start of the run (a work tree edited meanwhile changes neither)."""
    from fastapi.testclient import TestClient

    from qkv.explore import create_app

    alone = TestClient(create_app(allowed_hosts=["testserver"]))
    for step in lesson(random.Random(0), 0, 0, views):
        for path, body in step:
            alone.post(path, json=body)
    return alone


def check_own_answers(record: Record, alone) -> dict:
    """Each kept answer against qkv called directly (vectors: qkv.explain) or a fresh app's
    answer to the same request alone. Live timings are timings: not compared."""
    import numpy as np

    import qkv

    checked, wrong = 0, []
    for (who, path), kept in sorted(record.kept.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if path == "/api/cost/growth" or not path.startswith("/api/") or path in FIXED:
            continue  # timings are timings; the page's fixed GETs ask nothing of their own
        for body, answer in kept:
            if path == "/api/trace":
                trace = qkv.explain(body["queries"], body["keys"], body["values"])
                shown = answer["trace"]
                ok = (shown["q"] == body["queries"]
                      and np.allclose(shown["weights"], trace.weights, rtol=1e-6, atol=1e-9)
                      and np.allclose(shown["output"], trace.output, rtol=1e-6, atol=1e-9))
            else:
                ok = close(answer, alone.post(path, json=body).json())
            checked += 1
            if not ok:
                wrong.append(f"learner {who} {path} {json.dumps(body)[:120]}")
    return {"checked": checked, "wrong": wrong}


# -- the report --------------------------------------------------------------------------------
def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, math.ceil(q / 100 * len(xs)) - 1))]


def summary(record: Record) -> list[dict]:
    rows = []
    for path in sorted(set(record.seconds) | set(record.errors)):
        xs = record.seconds.get(path, [])
        statuses = dict(record.status.get(path, {}))
        rows.append({"endpoint": path, "n": len(xs), "light": path in LIGHT,
                     "p50": pct(xs, 50) if xs else None, "p95": pct(xs, 95) if xs else None,
                     "p99": pct(xs, 99) if xs else None, "max": max(xs) if xs else None,
                     "errors": len(record.errors.get(path, [])),
                     "5xx": sum(n for s, n in statuses.items() if s >= 500),
                     "not_200": {s: n for s, n in statuses.items() if s != 200}})
    return rows


def print_report(args, rows, result, own, misbehaved) -> None:
    mib = 1024 * 1024
    print(f"qkv explore --classroom on 127.0.0.1: {args.learners} learners, "
          f"{args.seconds:g} s (ran {result['elapsed']:.0f} s), think {args.think:g} s, "
          f"views {','.join(args.views)}, {os.cpu_count()} cores"
          + ("" if args.no_misbehaver else ", one misbehaving client"))
    print(f"{'endpoint':28} {'n':>6} {'p50 s':>7} {'p95 s':>7} {'p99 s':>7} {'max s':>7} "
          f"{'errors':>6} {'5xx':>4}  other statuses")
    f = lambda x: "-" if x is None else f"{x:7.3f}"  # noqa: E731
    for r in rows:
        print(f"{r['endpoint']:28} {r['n']:6d} {f(r['p50'])} {f(r['p95'])} {f(r['p99'])} "
              f"{f(r['max'])} {r['errors']:6d} {r['5xx']:4d}  "
              f"{r['not_200'] or ''}{'  (light)' if r['light'] else ''}")
    light = [r for r in rows if r["light"] and r["p95"] is not None]
    if light:
        worst = max(light, key=lambda r: r["p95"])
        print(f"light endpoints: worst p95 {worst['p95']:.3f} s ({worst['endpoint']})")
    q = result["queue"]
    print(f"queue: longest wait {q['longest_wait_seconds']:.1f} s, most waiting at once "
          f"{q['most_waiting']}, served {q['served']}, replaced {q['replaced']}, refused "
          f"{q['refused']} (workers {q['workers']})")
    grew = (result["peak_rss"] - result["idle_rss"]) / mib
    print(f"server RSS: idle {result['idle_rss'] / mib:.0f} MiB (every model loaded), peak "
          f"{result['peak_rss'] / mib:.0f} MiB (+{grew:.0f} MiB)")
    print(f"this client's own event loop lagged up to {result['client_loop_lag_max']:.2f} s "
          f"(machine load average at the end: {os.getloadavg()[0]:.1f})")
    if not args.no_misbehaver:
        print(f"misbehaving client: {json.dumps(misbehaved)}")
    print(f"own answers: {own['checked']} checked, {len(own['wrong'])} not the learner's own"
          + (f": {own['wrong'][:5]}" if own["wrong"] else ""))
    log = result["server_log"]
    print(f"server log: {len(log)} lines" + ("" if not log else ", the last ones:"))
    for line in log[-20:]:
        print(f"  {line}")
    if result["unavailable"]:
        print(f"not measured (models missing, 503): {', '.join(result['unavailable'])}")
    if result["unfinished"] or result["task_failures"]:
        print(f"learners unfinished at the end: {result['unfinished']}; failed: "
              f"{result['task_failures'][:3]}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--learners", type=int, default=30)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--seconds", type=float, default=None, help="instead of --minutes")
    parser.add_argument("--think", type=float, default=3.0,
                        help="mean seconds a learner thinks between steps (exponential)")
    parser.add_argument("--views", default=",".join(VIEWS),
                        help=f"the views walked, in the lesson's order (of {','.join(VIEWS)})")
    parser.add_argument("--no-misbehaver", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    args.seconds = args.seconds if args.seconds is not None else args.minutes * 60
    args.views = [v for v in args.views.split(",") if v]
    unknown = sorted(set(args.views) - set(VIEWS))
    if unknown or not 1 <= args.learners <= 200 or not 0 < args.seconds <= 3600:
        parser.error(f"--views from {','.join(VIEWS)} (unknown: {unknown}); --learners 1–200; "
                     "--seconds up to 3600")
    record, misbehaved = Record(), defaultdict(dict)
    server = Server()
    try:
        alone = reference(tuple(args.views))
        result = asyncio.run(room(server, args, record, misbehaved))
    finally:
        server_log = server.stop()
    result["server_log"] = server_log
    own = check_own_answers(record, alone)
    rows = summary(record)
    print_report(args, rows, result, own, misbehaved)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "learners": args.learners, "seconds": args.seconds, "think": args.think,
            "views": args.views, "endpoints": rows, **result, "own_answers": own,
            "misbehaving": misbehaved,
            "errors": {p: e[:5] for p, e in record.errors.items()}}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
