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
    except ModuleNotFoundError as exc:  # an optional extra is missing: say which
        if (exc.name or "qkv").split(".")[0] == "qkv":
            raise
        from ._install import install_hint

        print(f"qkv {args.command}: needs the package '{exc.name}', which is not installed. "
              f"Install the extras with: {install_hint('all')} (see README.md)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
