"""Entry point of the ``fpipe`` command: one sub-command per module in ``fpipe.cli``.

Each module defines ``add_parser(subparsers)`` and ``run(args)``. Help text is plain: module
docstrings lose their reST markup here, and every sub-command gets the examples below.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import textwrap

from fpipe._version import __version__
from fpipe.core.keywords import closest

# sub-command name -> module in fpipe.cli that defines add_parser(subparsers) and run(args)
COMMANDS: dict[str, str] = {
    "check": "fpipe.cli._check",
    "demo": "fpipe.cli._demo",
    "info": "fpipe.cli._info",
    "inspect": "fpipe.cli._inspect",
    "plan": "fpipe.cli._plan",
    "prepare": "fpipe.cli._prepare",
    "preview": "fpipe.cli._preview",
    "state": "fpipe.cli._state",
    "view": "fpipe.cli._view",
}

#: Examples shown at the end of each sub-command's help (``"state show"`` for nested ones).
EXAMPLES: dict[str, tuple[str, ...]] = {
    "demo": ("fpipe demo", "fpipe demo --keep /tmp/fpipe-demo --workers 0"),
    "info": ("fpipe info data/coco --shards",),
    "inspect": (
        "fpipe inspect data/vqa --batch-size 16 --length-column tokens --budget 4096 "
        "--plot packs.png",
    ),
    "plan": (
        "fpipe plan plan.yaml --step 1200",
        "fpipe plan data/coco --batch-size 32 --world-size 8 --seed 1234 --step 1200 --rank 3",
    ),
    "prepare": (
        "fpipe prepare data/coco --field image=jpg --field caption=txt "
        "--sample-type CaptioningSample --split 8,1,1",
        "fpipe prepare data/clips.csv --root data/media",
    ),
    "preview": ("fpipe preview data/coco --n 16 --out grid.png",),
    "state": ("fpipe state show ckpt/loader_state.bin --config plan.yaml",),
    "state show": ("fpipe state show ckpt/loader_state.bin", "fpipe state show ckpt.pt --json"),
    "view": (
        "fpipe view data/coco",
        "fpipe view plan.yaml --mix-history ckpt/mix_history.json --state ckpt/loader_state.bin",
    ),
}

DESCRIPTION = """\
fpipe: multimodal, data-parallel, exactly resumable data loading for PyTorch.

Start with `fpipe demo`; `fpipe COMMAND --help` describes each command with an example."""

_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")  # :mod:`fpipe.cli`, :class:`~fpipe.x.Y`
_LITERAL = re.compile(r"``([^`]+)``")


def plain_text(doc: str | None) -> str:
    """A docstring as plain help text: reST roles and double backticks removed, prose
    paragraphs re-wrapped to 88 columns, indented blocks (examples, YAML) kept as they are.

    >>> plain_text("Run ``fpipe prepare``\\nfrom :func:`~fpipe.storage.prepare_dataset`.")
    'Run fpipe prepare from prepare_dataset.'
    """
    text = _ROLE.sub(lambda m: m.group(1).rsplit(".", 1)[-1] if "~" in m.group(0) else m.group(1),
                     textwrap.dedent(doc or "").strip())  # fmt: skip
    text = _LITERAL.sub(r"\1", text).replace("::\n", ":\n")
    out = []
    for para in text.split("\n\n"):
        lines = para.splitlines()
        prose = all(not line.startswith((" ", "-")) for line in lines) and not para.endswith(":")
        out.append(textwrap.fill(" ".join(lines), 88) if prose else para)
    return "\n\n".join(out)


def _finish_help(p: argparse.ArgumentParser, name: str) -> None:
    """Plain description plus examples, for ``p`` and its nested sub-commands."""
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    text = plain_text(p.description or "")
    examples = EXAMPLES.get(name, ())
    if examples:
        text += "\n\nexample" + ("s" if len(examples) > 1 else "") + ":\n"
        text += "\n".join(f"  {e}" for e in examples)
    p.description = text
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                help_line = next(
                    (c.help for c in action._choices_actions if c.dest == sub_name), ""
                )
                sub.description = sub.description or help_line
                _finish_help(sub, f"{name} {sub_name}")


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser with every registered sub-command."""
    parser = argparse.ArgumentParser(
        prog="fpipe", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"fpipe {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in COMMANDS.items():
        _finish_help(importlib.import_module(module).add_parser(sub), name)
    return parser


#: Exit status after the reader of the output went away: 128 + SIGPIPE, what a shell reports
#: for a Unix tool that a closed pipe stopped (``yes | head``).
BROKEN_PIPE_STATUS = 141


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so that flushing it at exit cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (captured output)
        pass


def main(argv: list[str] | None = None) -> int:
    """Run the ``fpipe`` command line; returns the process exit status.

    Ctrl-C ends a command with status 130 and one line on stderr, no traceback; a closed
    input (Ctrl-D at a prompt) ends it with status 1 likewise. A closed output pipe
    (``fpipe info DIR | head``) ends it quietly with status 141, as Unix tools end.
    """
    try:
        status = _run(argv)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return status
    except BrokenPipeError:
        _drop_stdout()
        return BROKEN_PIPE_STATUS


def _chosen_parser(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> argparse.ArgumentParser:
    """The parser of the innermost sub-command ``args`` chose (``parser`` when none)."""
    while True:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        name = getattr(args, sub.dest, None) if sub is not None else None
        if name is None:
            return parser
        parser = sub.choices[name]


def _refuse_unknown(parser: argparse.ArgumentParser, extras: list[str]) -> None:
    """Exit as argparse does for unrecognized arguments, but from the sub-command's parser
    (its usage, not the top-level one) and with the closest of its flags for each unknown
    one."""
    flags = [s for a in parser._actions for s in a.option_strings if s.startswith("--")]
    typed = [arg.split("=", 1)[0] for arg in extras if arg.startswith("--")]
    hints = {flag: close for flag in typed if (close := closest(flag, flags))}
    if len(hints) == 1:
        hint = f" (did you mean {next(iter(hints.values()))}?)"
    else:
        hint = "".join(f"\n  {flag}: did you mean {close}?" for flag, close in hints.items())
    parser.error(f"unrecognized arguments: {' '.join(extras)}{hint}")


def _run(argv: list[str] | None) -> int:
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        _refuse_unknown(_chosen_parser(parser, args), extras)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(importlib.import_module(COMMANDS[args.command]).run(args) or 0)
    except KeyboardInterrupt:
        print(f"\nfpipe {args.command}: interrupted", file=sys.stderr)
        return 130
    except EOFError:
        print(f"\nfpipe {args.command}: no input (end of file); nothing done", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
