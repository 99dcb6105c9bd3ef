"""Run the explorer: bind a socket, serve the app with uvicorn, optionally open a browser.

Loopback (127.0.0.1) by default. Port 0 picks a free port; the URL actually served is printed
as the first line on stdout (``qkv explore: serving on http://127.0.0.1:PORT/``), which is how
the tests find a server they started with ``--port 0``.
"""

from __future__ import annotations

import socket
import sys
import threading
import webbrowser

from .app import create_app
from .classroom import (
    Classroom,
    NoLanAddress,
    cap_malloc_arenas,
    join_url,
    lan_address,
    print_banner,
)
from .hosts import WILDCARDS, allowed_hosts_for, is_loopback
from .joincode import redact_logs
from .limits import timed_h11_protocol

READY = "qkv explore: serving on "
CLASSROOM_CONNECTIONS = 1000  # connections (and requests) at once before uvicorn answers 503


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on (host, port); OSError names the address if it is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets whose proto says TCP (the
    # accepted ones inherit it). Without it Nagle's algorithm holds a response's second write
    # (uvicorn sends headers and body apart) until the client's delayed ACK: ~40 ms per request
    # on a kept-alive connection, every slider step.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port} ({exc.strerror}); is another server "
                      "using it? Pick another port with --port, or --port 0 for any free one") \
            from None
    sock.listen(128)
    return sock


def url_of(sock: socket.socket, host: str) -> str:
    port = sock.getsockname()[1]
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else ("[::1]" if host == "::" else host)
    shown = f"[{shown.strip('[]')}]" if ":" in shown else shown
    return f"http://{shown}:{port}/"


def room_url(sock: socket.socket, host: str) -> str:
    """The address learners open: bound to every address (0.0.0.0), the LAN one, not
    127.0.0.1, which on a learner's machine is their own."""
    if host.strip("[]") in WILDCARDS:
        try:
            host = lan_address()
        except NoLanAddress as exc:
            print(f"qkv explore: warning: {exc}", file=sys.stderr)
    return url_of(sock, host)


def warm_measured() -> None:
    """Score the shipped models on their held-out sets (the far-back and encoder–decoder
    curves, a few seconds of CPU) while the learner is still on the first views; the views
    then answer from the cache. Missing checkpoints are left for the views to report."""
    from . import farback_service, seq2seq_service

    for curves, unavailable in ((seq2seq_service.curves, seq2seq_service.Seq2SeqUnavailable),
                                (farback_service.curves, farback_service.FarbackUnavailable)):
        try:
            curves()
        except (unavailable, ImportError):
            pass  # the view says what is missing when it is opened


def serve(host: str = "127.0.0.1", port: int = 8765, open_browser: bool = True,
          model_folder: str | None = None, hf: bool = False, classroom: bool = False,
          access_log: bool = False) -> None:
    """Serve the explorer until interrupted (Ctrl-C). ``model_folder``: a local transformers
    model folder for the model view instead of MiniLM (``hf``: through transformers even when
    qkv's own MiniLM could read it). ``classroom``: a join code, printed with its address and
    QR code, and fair service of the heavy endpoints (:mod:`qkv.explore.classroom`).
    ``access_log``: a line per request on stdout (never with the join code)."""
    import functools

    import uvicorn

    from .model_service import ModelService, load_folder

    sock = bind(host, port)
    url = url_of(sock, host)
    room = Classroom() if classroom else None
    if room is not None:
        cap_malloc_arenas()  # before the server's threads: what a room's requests leave behind
        print_banner(room_url(sock, host), room.code)
    elif not is_loopback(host):
        print(f"qkv explore: warning: listening on {host}, so other machines can reach this "
              "server; use the default --host 127.0.0.1 to keep it to this machine, or "
              "--classroom to admit only those given its join code", file=sys.stderr)
    service = None
    if model_folder is not None or hf:
        service = ModelService(loader=functools.partial(load_folder, model_folder, hf))
    app = create_app(allowed_hosts=allowed_hosts_for(host), model_service=service,
                     classroom=room)
    # h11 with a deadline on request headers; bodies are bounded in time by BodyLimits. A
    # room's browsers each keep up to 6 connections open: 30 learners need more than 200.
    config = uvicorn.Config(app, http=timed_h11_protocol(),
                            log_level="info" if access_log else "warning",
                            access_log=access_log, lifespan="off",
                            limit_concurrency=CLASSROOM_CONNECTIONS if room else 200,
                            timeout_keep_alive=5)
    if room is not None:  # after uvicorn configured its loggers (in Config)
        redact_logs(room.code)
    server = uvicorn.Server(config)
    threading.Thread(target=warm_measured, name="qkv-explore-warm", daemon=True).start()
    print(READY + url, flush=True)
    if open_browser:
        # a classroom's teacher joins too: their browser opens the address with the code
        shown = join_url(url, room.code) if room is not None else url
        threading.Timer(0.5, webbrowser.open, args=(shown,)).start()
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
