"""Open a local web page to explore attention: drag queries and keys, move the scale, edit
masks, and look inside MiniLM's heads (or,
with --model FOLDER, a local transformers model's). Every number on the page is computed by qkv.

The server binds to 127.0.0.1 (this machine only) unless --host says otherwise, and works
offline: the page and its assets ship inside the package. Stop it with Ctrl-C.

For a room: --classroom listens on this machine's network address, prints a join code, the
address to open (with the code) and its QR code, and answers only browsers that have shown the
code; the heavy views take turns, fairly between learners.
"""

from __future__ import annotations

import argparse
import sys

HELP = "open a local web explorer of queries, keys, values, scale, masks and MiniLM's heads"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=8765,
                        help="port to listen on (default 8765; 0 picks a free one)")
    parser.add_argument("--host", default=None,
                        help="address to listen on (default 127.0.0.1: this machine only; "
                             "with --classroom, this machine's network address)")
    parser.add_argument("--classroom", action="store_true",
                        help="serve a room: listen on this machine's network address, print a "
                             "join code with the address and a QR code to open, answer only "
                             "browsers that have shown the code, and share the heavy views' "
                             "work fairly between learners")
    parser.add_argument("--access-log", action="store_true",
                        help="print a line per request (never the join code)")
    parser.add_argument("--no-browser", action="store_true",
                        help="do not open a web browser, just print the address")
    parser.add_argument("--model", metavar="FOLDER",
                        help="show this local Hugging Face transformers model folder's heads "
                             "in the model view instead of MiniLM (as qkv look --model)")
    parser.add_argument("--hf", action="store_true",
                        help="run the model through transformers (attn_implementation='qkv') "
                             "even when qkv's own MiniLM could read it")


def run(args: argparse.Namespace) -> int:
    from qkv._install import require

    require("qkv explore", "fastapi", "uvicorn", "pydantic")
    from qkv.explore.server import serve

    if not 0 <= args.port <= 65535:
        print(f"qkv explore: --port must be between 0 and 65535, got {args.port}", file=sys.stderr)
        return 2
    if args.model is not None:
        from qkv.models import ModelFilesError
        from qkv.models.folder import read_folder_config

        try:  # a folder that is no model at all is said now; the weights load on first use
            read_folder_config(args.model)
        except ModelFilesError as exc:
            print(f"qkv explore: {exc}", file=sys.stderr)
            return 2
    host = args.host
    if host is None:
        host = "127.0.0.1"
        if args.classroom:
            from qkv.explore.classroom import NoLanAddress, lan_address

            try:
                host = lan_address()
            except NoLanAddress as exc:
                print(f"qkv explore: {exc}", file=sys.stderr)
                return 2
    try:
        serve(host, args.port, open_browser=not args.no_browser,
              model_folder=args.model, hf=args.hf, classroom=args.classroom,
              access_log=args.access_log)
    except OSError as exc:
        print(f"qkv explore: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0
