"""``qkv explore --classroom``: the machine's LAN address, a join code, and what the teacher
shows the room (the address with the code, and a QR code of it in the terminal).

The join code and the cookie it sets are :mod:`qkv.explore.joincode`'s; fair service of the
heavy endpoints is :mod:`qkv.explore.fairqueue`'s.
"""

from __future__ import annotations

import socket
import sys
from dataclasses import dataclass, field

from .fairqueue import FairQueue
from .joincode import PARAM, Guesses, new_code

# Where a UDP socket is "connected" to learn which address this machine's route out uses.
# connect() on a UDP socket sends nothing; TEST-NET-1 (RFC 5737) is never a real host.
ROUTE_PROBE = ("192.0.2.1", 9)


@dataclass
class Classroom:
    """What a classroom server holds: its join code, the wrong guesses per address, and the
    heavy endpoints' queue."""

    code: str = field(default_factory=new_code)
    queue: FairQueue = field(default_factory=FairQueue)
    guesses: Guesses = field(default_factory=Guesses)


class NoLanAddress(OSError):
    pass


def lan_address(probe: tuple[str, int] = ROUTE_PROBE) -> str:
    """This machine's address on its network (the source address of its default route)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(probe)
            address = s.getsockname()[0]
    except OSError as exc:
        raise NoLanAddress(f"--classroom found no network address on this machine ({exc}); "
                           "connect it to the room's network, or name the address to listen "
                           "on with --host") from None
    if address.startswith("127.") or address == "0.0.0.0":
        raise NoLanAddress("--classroom found only a loopback address on this machine; connect "
                           "it to the room's network, or name the address with --host")
    return address


def join_url(url: str, code: str) -> str:
    return f"{url}?{PARAM}={code}"


def print_banner(url: str, code: str, out=None) -> None:
    """What the teacher shows the room: the code, the address with it, and its QR code."""
    out = out or sys.stdout
    link = join_url(url, code)
    print(f"qkv explore: classroom, join code {code}", file=out)
    print(f"qkv explore: learners open {link}", file=out)
    try:
        import segno
    except ImportError:
        print("qkv explore: (no QR code: segno is not installed; pip install 'qkv[explore]' "
              "brings it)", file=out)
    else:
        print("qkv explore: or scan this with a phone or tablet on the same network:", file=out)
        segno.make(link, error="m").terminal(out=out, compact=True)
    print("qkv explore: each browser is asked for the code once; a restart makes a new code",
          file=out, flush=True)


M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)
MALLOC_ARENAS = 2


def cap_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Let glibc's malloc keep at most ``arenas`` arenas; False where the C library is not
    glibc (nothing is changed there).

    Why: each thread that allocates gets an arena of its own (up to 8 per core), and memory
    freed in an arena stays with it. A room's requests run on many worker threads, and 30
    simulated learners grew the server ~500 MB above its idle size with the default; with two
    arenas, ~260 MB (benchmarks/classroom.py, docs/explore.md). Called before the server's
    threads start: arenas made earlier stay."""
    import ctypes
    import platform

    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        return bool(ctypes.CDLL(None).mallopt(M_ARENA_MAX, arenas))
    except (OSError, AttributeError):
        return False
