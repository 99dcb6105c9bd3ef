"""The ``qkv`` command line: one subcommand per module in :mod:`qkv.commands`.

Each command module defines ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args)``,
and keeps its heavy imports (rich, the model, the server) inside ``run`` so that ``qkv --help``
stays fast and works without the optional extras.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name → module; the order is the order shown by `qkv --help`.
COMMANDS = {
    "demo": "qkv.commands.demo",
    "look": "qkv.commands.look",
    "bench": "qkv.commands.bench",
    "warm": "qkv.commands.warm",
    "explore": "qkv.commands.explore",
    "train": "qkv.commands.train",
    "ring": "qkv.commands.ring",
}


def _version() -> str:
    from . import __version__

    return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="qkv",
        description="Attention you can see, check and train: softmax(Q Kᵀ / √d_k) V.",
    )
    parser.add_argument("--version", action="version", version=f"qkv {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        cmd = sub.add_parser(name, help=module.HELP, description=module.__doc__,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(cmd)
        cmd.set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except ModuleNotFoundError as exc:  # an optional extra is missing: say which, in one line
        top = (exc.name or "qkv").split(".")[0]
        if top == "qkv":
            raise
        from ._install import MissingExtra, missing_message

        # A message that already says how to install (MissingExtra, qkv.distributed's) is kept.
        said = isinstance(exc, MissingExtra) or "pip install" in str(exc)
        message = str(exc) if said else missing_message(f"qkv {args.command}", [top])
        print(message, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
