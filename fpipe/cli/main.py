"""Entry point of the ``fpipe`` command: one sub-command per module in :mod:`fpipe.cli`."""

from __future__ import annotations

import argparse
import importlib
import sys

from fpipe._version import __version__

# sub-command name -> module in fpipe.cli that defines add_parser(subparsers) and run(args)
COMMANDS: dict[str, str] = {
    "demo": "fpipe.cli.demo",
    "info": "fpipe.cli.info",
    "inspect": "fpipe.cli.inspect",
    "plan": "fpipe.cli.plan",
    "prepare": "fpipe.cli.prepare",
    "preview": "fpipe.cli.preview",
    "state": "fpipe.cli.state",
}


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser with every registered sub-command."""
    parser = argparse.ArgumentParser(prog="fpipe", description=__doc__)
    parser.add_argument("--version", action="version", version=f"fpipe {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMANDS.values():
        importlib.import_module(module).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``fpipe`` command line; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return int(importlib.import_module(COMMANDS[args.command]).run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
