"""Open a local web page to explore attention: drag queries and keys, move the scale, edit
masks, and look inside MiniLM's heads. Every number on the page is computed by qkv.

The server binds to 127.0.0.1 (this machine only) unless --host says otherwise, and works
offline: the page and its assets ship inside the package. Stop it with Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys

HELP = "open a local web explorer of queries, keys, values, scale, masks and MiniLM's heads"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=8765,
                        help="port to listen on (default 8765; 0 picks a free one)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only)")
    parser.add_argument("--no-browser", action="store_true",
                        help="do not open a web browser, just print the address")


def run(args: argparse.Namespace) -> int:
    from qkv.explore.server import serve

    if not 0 <= args.port <= 65535:
        print(f"qkv explore: --port must be between 0 and 65535, got {args.port}", file=sys.stderr)
        return 2
    try:
        serve(args.host, args.port, open_browser=not args.no_browser)
    except OSError as exc:
        print(f"qkv explore: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0
