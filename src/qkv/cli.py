"""The ``qkv`` command line: one subcommand per module in :mod:`qkv.commands`.

Each command module defines ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args)``,
and keeps its heavy imports (rich, the model, the server) inside ``run`` so that ``qkv --help``
stays fast and works without the optional extras.
"""

from __future__ import annotations

import argparse
import difflib
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


def _unknown_words(parser: argparse.ArgumentParser, extra: list[str]) -> str:
    """What a command did not understand, each unknown option with the nearest it has."""
    options = [o for action in parser._actions for o in action.option_strings]
    said = []
    for i, word in enumerate(extra):
        if not word.startswith("-"):
            if i and extra[i - 1].startswith("-"):
                continue  # the value of the unknown option before it
            said.append(f"{word!r} (an argument this command does not take)")
            continue
        name = word.split("=", 1)[0]
        near = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
        said.append(f"{name} (did you mean {near[0]}?)" if near else name)
    return f"unknown option{'s' if len(said) > 1 else ''}: {'; '.join(said)}"


def _chosen(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost command the words chose ("qkv train recall" → train's recall parser)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = getattr(args, action.dest, None)
            if chosen in action.choices:
                return _chosen(action.choices[chosen], args)
    return parser


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
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # the command's own usage, not qkv's, and the nearest option it has
        command = _chosen(parser, args)
        command.error(_unknown_words(command, extra))
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
