"""Subcommands of the ``qkv`` command line (see :mod:`qkv.cli`)."""
