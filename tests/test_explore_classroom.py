"""`qkv explore --classroom`: the join code (refused without, accepted with, a cookie after),
wrong codes slowed, the code absent from logs, loopback unchanged, and the LAN address found and
served to a learner on "another machine" (a network namespace this test makes).

Traffic goes only to loopback or to the namespaces made here — never to this machine's own
network address: the CLI runs here are given ``--host 127.0.0.1`` for the address --classroom
would otherwise find.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from qkv.explore import create_app
from qkv.explore.classroom import Classroom, NoLanAddress, lan_address
from qkv.explore.joincode import COOKIE, Guesses, RedactJoinCode
from qkv.explore.server import READY

CODE = "K7P4QX"
START_TIMEOUT = 60


def room(**guesses) -> Classroom:
    return Classroom(code=CODE, guesses=Guesses(**guesses))


@pytest.fixture
def client():
    with TestClient(create_app(allowed_hosts=["testserver"], classroom=room(first=0.0)),
                    follow_redirects=False) as c:
        yield c


def test_nothing_is_answered_without_the_code(client):
    page = client.get("/")
    assert page.status_code == 401
    assert "?join=" in page.text and "Traceback" not in page.text
    api = client.post("/api/scale", json={"d_k": 4})
    assert api.status_code == 401 and "join" in api.json()["detail"]
    for path in ("/static/main.js", "/api/health", "/api/queue", "/openapi.json"):
        assert client.get(path).status_code == 401, path
    assert COOKIE not in client.cookies


def test_the_code_sets_a_cookie_once_and_leaves_the_address(client):
    joined = client.get(f"/?join={CODE.lower()}&view=scale")
    assert joined.status_code == 303
    assert joined.headers["location"] == "/?view=scale"  # the code is not in the address
    cookie = joined.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and CODE not in cookie
    assert client.get("/").status_code == 200
    assert client.post("/api/scale", json={"d_k": 4}).status_code == 200
    again = client.get(f"/?join={CODE}")  # a second visit with the code keeps the learner
    assert again.status_code == 303 and again.cookies.get(COOKIE) == client.cookies[COOKIE]


def test_a_wrong_code_or_a_forged_cookie_gets_the_page_that_says_how_to_join(client):
    wrong = client.get("/?join=AAAAAA")
    assert wrong.status_code == 403
    assert wrong.headers["content-type"].startswith("text/html")
    assert "To join" in wrong.text and "Traceback" not in wrong.text and "AAAAAA" not in wrong.text
    assert COOKIE not in wrong.headers.get("set-cookie", "")
    client.cookies.set(COOKIE, "0123456789abcdef.00")
    forged = client.get("/api/health")
    assert forged.status_code == 403 and "restarted" in forged.json()["detail"]
    other = TestClient(create_app(allowed_hosts=["testserver"], classroom=room(first=0.0)))
    joined = other.get(f"/?join={CODE}", follow_redirects=False)
    # the same code on another server (a restart): its cookie is not this server's
    client.cookies.set(COOKIE, joined.cookies[COOKIE])
    assert client.get("/").status_code == 403


def test_repeated_wrong_codes_from_one_address_are_slowed_even_in_parallel():
    first = 0.05
    app = create_app(allowed_hosts=["testserver"], classroom=room(first=first, most=1.0))

    async def guesses(n: int) -> tuple[float, list[int]]:
        transport = httpx.ASGITransport(app=app, client=("10.0.0.9", 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            t0 = time.perf_counter()
            answers = await asyncio.gather(*(c.get(f"/?join=BAD{i:03d}") for i in range(n)))
            return time.perf_counter() - t0, [a.status_code for a in answers]

    took, codes = asyncio.run(guesses(4))
    # one at a time, each twice as long as the last: 0.05 + 0.1 + 0.2 + 0.4 s
    assert codes == [403] * 4
    assert took >= first * (1 + 2 + 4 + 8) * 0.9, took
    took, codes = asyncio.run(guesses(12))  # more than 4 waiting: the rest refused unchecked
    assert sorted(set(codes)) == [403, 429] and codes.count(403) <= 5


def test_on_loopback_without_classroom_nothing_changes():
    with TestClient(create_app(allowed_hosts=["testserver"]), follow_redirects=False) as c:
        page = c.get(f"/?join={CODE}")
        assert page.status_code == 200 and "set-cookie" not in page.headers
        assert c.post("/api/scale", json={"d_k": 4}).status_code == 200
        queue = c.get("/api/queue")  # no queue: said, not a 404 (a console error on the page)
        assert queue.status_code == 200 and queue.json()["classroom"] is False


def test_the_log_filter_hides_the_code_and_any_join_value():
    redact = RedactJoinCode(CODE)
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1,
                               '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:5", "GET", f"/?join={CODE}&x=1", "1.1", 303), None)
    redact.filter(record)
    assert CODE not in record.getMessage() and "join=…&x=1" in record.getMessage()
    record = logging.LogRecord("qkv", logging.INFO, __file__, 1, f"code {CODE.lower()}", (), None)
    redact.filter(record)
    assert CODE.lower() not in record.getMessage()


def test_lan_address_says_what_to_do_when_there_is_no_network(monkeypatch):
    with pytest.raises(NoLanAddress, match="--host"):
        lan_address(("127.0.0.1", 9))  # a route to loopback only: no network address


class Server:
    """``python -m qkv explore --no-browser ARGS`` with its output kept line by line."""

    def __init__(self, *args: str, prefix: tuple[str, ...] = ()):
        cmd = [*prefix, sys.executable, "-m", "qkv", "explore", "--no-browser", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, cwd=Path(__file__).parent)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT
        while not any(line.startswith(READY) for line in self.seen):
            try:
                self.seen.append(self.lines.get(timeout=max(0.1, deadline - time.monotonic())))
            except queue.Empty:
                self.stop()
                raise AssertionError(f"qkv explore did not start: {''.join(self.seen)}") from None
        self.url = self.seen[-1][len(READY):].strip()
        self.banner = "".join(self.seen)

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.put(line)

    def stop(self) -> str:
        """Stop the server; everything it printed after it started serving."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        time.sleep(0.2)
        rest = []
        while not self.lines.empty():
            rest.append(self.lines.get())
        return "".join(rest)


def code_in(banner: str) -> str:
    return banner.split("join code ", 1)[1].split()[0]


def test_the_cli_prints_the_code_its_address_and_a_qr_code_and_never_logs_the_code():
    server = Server("--classroom", "--host", "127.0.0.1", "--port", "0", "--access-log")
    try:
        code = code_in(server.banner)
        assert f"{server.url}?join={code}" in server.banner
        assert "█" in server.banner  # the QR code, drawn in the terminal
        with httpx.Client(base_url=server.url, timeout=30, follow_redirects=True) as c:
            assert c.get("/").status_code == 401
            assert c.get("/?join=ZZZZZZ").status_code == 403
            assert c.get(f"/api/health?join={code}").status_code == 200  # after the redirect
            assert c.post("/api/scale", json={"d_k": 4}).status_code == 200
            assert c.get(f"/api/queue?join={code.lower()}").status_code == 200
    finally:
        log = server.stop()
    assert '"POST /api/scale HTTP/1.1" 200' in log  # the access log was on ...
    assert code not in log and code.lower() not in log and "ZZZZZZ" not in log  # ... and clean


def test_the_default_is_still_loopback_without_a_code():
    server = Server("--port", "0")
    try:
        assert server.url.startswith("http://127.0.0.1:") and "join code" not in server.banner
        with httpx.Client(base_url=server.url, timeout=30) as c:
            assert c.get("/").status_code == 200
    finally:
        server.stop()


def test_a_learner_on_another_machine_joins_the_classroom_on_its_lan_address():
    """The server runs in one network namespace with a route out, so --classroom finds that
    namespace's address by itself; a learner in a second namespace joins through the bridge."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from _netns import Hosts, _ip, unavailable

    why = unavailable()
    if why:
        pytest.skip(f"no network namespaces here: {why}")
    with Hosts(2) as hosts:
        _ip("-n", hosts.names[0], "route", "add", "default", "via", f"{hosts.subnet}.254")
        server = Server("--classroom", "--port", "0",
                        prefix=("ip", "netns", "exec", hosts.names[0]))
        try:
            lan = f"{hosts.subnet}.1"
            assert server.url.startswith(f"http://{lan}:"), server.url
            code = code_in(server.banner)
            learner = ("import httpx, sys\n"
                       "with httpx.Client(base_url=sys.argv[1], timeout=30,\n"
                       "                  follow_redirects=True) as c:\n"
                       "    print(c.get('/').status_code)\n"
                       "    print(c.get('/?join=' + sys.argv[2]).status_code)\n"
                       "    print(c.post('/api/scale', json={'d_k': 4}).status_code)\n")
            run = subprocess.run(["ip", "netns", "exec", hosts.names[1], sys.executable, "-c",
                                  learner, server.url, code],
                                 capture_output=True, text=True, timeout=60)
            assert run.returncode == 0, run.stderr
            assert run.stdout.split() == ["401", "200", "200"]
        finally:
            server.stop()


def test_bound_to_every_address_the_room_is_shown_the_lan_one(monkeypatch):
    from qkv.explore import server

    monkeypatch.setattr(server, "lan_address", lambda: "10.9.8.7")  # no socket opened here
    sock = server.bind("127.0.0.1", 0)
    try:
        port = sock.getsockname()[1]
        assert server.room_url(sock, "0.0.0.0") == f"http://10.9.8.7:{port}/"
        assert server.room_url(sock, "127.0.0.1") == f"http://127.0.0.1:{port}/"
    finally:
        sock.close()


def test_the_arena_cap_is_taken_only_from_glibc(monkeypatch):
    import platform

    from qkv.explore.classroom import cap_malloc_arenas

    monkeypatch.setattr(platform, "libc_ver", lambda *a, **k: ("musl", "1.2"))
    assert cap_malloc_arenas() is False  # nothing is changed on another C library
