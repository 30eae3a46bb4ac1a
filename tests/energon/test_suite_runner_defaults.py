"""The Energon suite runner's defaults (tests/energon/suite_runner.py): it finds the venv that
.ci/run creates, says what to pass when there is none, and gives a venv without pytest (as
.ci/run creates it) pytest from the Python running the runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.energon.suite_runner import default_python, ensure_extras, main


def test_default_python_is_the_venv_ci_creates(tmp_path, monkeypatch):
    monkeypatch.delenv("FPIPE_ENERGON_PYTHON", raising=False)
    assert default_python(tmp_path) == tmp_path / ".venv-energon" / "bin" / "python"
    monkeypatch.setenv("FPIPE_ENERGON_PYTHON", "/opt/energon/bin/python")
    assert default_python(tmp_path) == Path("/opt/energon/bin/python")


def test_missing_venv_is_refused_with_what_to_pass(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("FPIPE_ENERGON_PYTHON", raising=False)
    with pytest.raises(SystemExit):
        main(["--energon", str(tmp_path), "--fpipe", str(tmp_path)])
    err = capsys.readouterr().err
    assert f"no Python at {tmp_path / '.venv-energon' / 'bin' / 'python'}" in err
    assert "--python" in err and ".ci/run" in err


def test_a_venv_without_pytest_gets_it_linked(tmp_path):
    # A Python that sees no site-packages plays a venv that lacks pytest (and fpipe's deps).
    bare = tmp_path / "bare-python"
    bare.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    bare.chmod(0o755)
    extras = tmp_path / "extras"
    ensure_extras(str(bare), extras)
    for name in ("pytest", "_pytest", "pluggy", "iniconfig"):
        assert (extras / name).is_symlink(), name
    probe = subprocess.run(
        [str(bare), "-c", "import pytest; print(pytest.__version__)"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(extras)},
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == pytest.__version__
