"""The command line as a newcomer meets it: plain help with a description and an example for
every sub-command, clean Ctrl-C / Ctrl-D, no object reprs in problem lines."""

from __future__ import annotations

import argparse
import sys

import pytest

from fpipe.cli import main as cli_main
from fpipe.cli.main import build_parser, main
from tests.storage.helpers import write_tar


def _all_parsers(parser, name="fpipe"):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _all_parsers(sub, f"{name} {sub_name}")


def test_every_command_has_plain_help_with_a_description_and_an_example():
    parsers = dict(_all_parsers(build_parser()))
    assert set(cli_main.COMMANDS) | {"state show"} <= {n.removeprefix("fpipe ") for n in parsers}
    for name, p in parsers.items():
        text = p.format_help()
        for markup in ("``", ":mod:", ":func:", ":class:", ":meth:"):
            assert markup not in text, f"{name} --help shows reST markup {markup!r}"
        if name == "fpipe":
            continue
        assert len(p.description or "") > 40, f"{name} has no description"
        assert "\nexample" in text and "  fpipe " in text, f"{name} --help has no example"


@pytest.mark.parametrize(
    "argv, usage, problem",
    [
        (
            ["prepare", "DIR", "--colunm", "x"],
            "usage: fpipe prepare [-h]",
            "fpipe prepare: error: unrecognized arguments: --colunm x (did you mean --column?)",
        ),
        (
            ["state", "show", "--jsn", "FILE", "--confg=plan.yaml"],
            "usage: fpipe state show [-h]",
            "--jsn: did you mean --json?\n  --confg: did you mean --config?",
        ),
        (["--verison"], "usage: fpipe [-h]", "unrecognized arguments: --verison (did you mean"),
    ],
)
def test_a_mistyped_flag_shows_its_commands_usage_and_the_closest_flag(
    argv, usage, problem, capsys
):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage) and problem in err


def test_ctrl_d_at_the_prepare_prompt_ends_cleanly(tmp_path, monkeypatch, capsys):
    write_tar(tmp_path / "s.tar", [("a", {"txt": b"x"})])

    def eof(prompt=""):
        raise EOFError

    monkeypatch.setattr("builtins.input", eof)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    assert main(["prepare", str(tmp_path), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "fpipe prepare: no input (end of file); nothing done" in err and "Traceback" not in err
    assert not (tmp_path / ".fpipe").exists()


def test_ctrl_c_ends_a_command_with_status_130(monkeypatch, capsys):
    import fpipe.cli._info

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(fpipe.cli._info, "run", interrupted)
    assert main(["info", "anything"]) == 130
    assert capsys.readouterr().err.strip() == "fpipe info: interrupted"


@pytest.mark.parametrize(
    "member, data, reason",
    [("jpg", b"\xff\xd8 junk", "undecodable image header (cannot identify image file)"),
     ("mp4", b"junk", "cannot open as audio/video: Invalid data found when processing input")],
)  # fmt: skip
def test_problem_lines_name_the_sample_not_python_objects(tmp_path, capsys, member, data, reason):
    write_tar(tmp_path / "s.tar", [("a", {member: data}), ("b", {"txt": b"fine"})])
    assert main(["prepare", str(tmp_path), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert f"problem: s.tar: s/a: member '{member}': {reason}\n" in err
    assert " object at 0x" not in err and "<none>" not in err and "[Errno" not in err


@pytest.mark.parametrize("argv", [["info", "{dir}", "--shards"], ["prepare", "{dir}"]])
def test_closed_output_pipe_ends_quietly(tmp_path, argv):
    """`fpipe info DIR | head`: the reader is gone before fpipe writes (the pipe's read end is
    closed first, so the write fails every time): no traceback, Unix status 141."""
    import os
    import subprocess

    write_tar(tmp_path / "s.tar", [("a", {"txt": b"x"})])
    assert main(["prepare", str(tmp_path), "--no-progress"]) == 0
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "fpipe.cli.main", *(a.format(dir=tmp_path) for a in argv)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 141, proc.stderr.decode()
    assert proc.stderr == b""


def test_python_dash_m_fpipe_runs_the_command(monkeypatch, capsys):
    """``python -m fpipe`` is the ``fpipe`` command (where the script is not on PATH): run as
    ``-m`` runs it here (runpy, as the interpreter does) and once in a new process."""
    import runpy
    import subprocess

    from fpipe._version import __version__

    monkeypatch.setattr(sys, "argv", ["fpipe", "--version"])
    # as in a fresh interpreter: a test that imported every module (the public API's) leaves
    # fpipe.__main__ imported, and runpy warns that it runs a module already there
    monkeypatch.delitem(sys.modules, "fpipe.__main__", raising=False)
    with pytest.raises(SystemExit) as done:
        runpy.run_module("fpipe", run_name="__main__", alter_sys=True)
    assert done.value.code in (0, None)
    assert capsys.readouterr().out.strip() == f"fpipe {__version__}"
    bad = subprocess.run(
        [sys.executable, "-m", "fpipe", "no-such-command"], capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
