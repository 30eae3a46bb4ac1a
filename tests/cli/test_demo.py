import contextlib
import io
import subprocess
import sys
import tempfile
import types

import pytest
from PIL import Image

from fpipe.cli import _demo
from fpipe.cli.main import main


@pytest.mark.slow  # a restore in a new process (imports torch)
def test_demo_shows_a_batch_a_preview_and_resumes_exactly(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the demo's folder goes
    argv = ["demo", "--steps", "4", "--after", "3", "--workers", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "\r" not in out  # plain lines when stdout is not a terminal
    assert "image     uint8[8, 3, 64, 64]" in out and "first caption: 'a " in out
    # the picture goes into this run's own folder (two runs never write the same file), which
    # keeps only it once the data is removed
    [folder] = tmp_path.iterdir()
    assert folder.name.startswith("fpipe-demo-")
    [png] = folder.iterdir()
    assert f"preview of the first 16 samples: {png}" in out
    with Image.open(png) as img:
        assert img.format == "PNG" and img.width > 300
    assert "first sample key     pixels sha256" in out  # every column labelled
    assert "the stream continued exactly" in out
    assert out.count(" yes\n") == 3


def _resume_in_this_process(cmd, **kwargs):
    """``subprocess.run`` for the demo's resumed half, run here: the same command line through
    the same ``main`` (the restore in a new process is the test above's)."""
    assert cmd[:3] == [sys.executable, "-m", "fpipe.cli.main"] and "--resume-from" in cmd
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(cmd[3:])
    return subprocess.CompletedProcess(cmd, code, out.getvalue(), "")


@pytest.mark.slow
def test_demo_keep_keeps_the_data(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(_demo, "subprocess", types.SimpleNamespace(run=_resume_in_this_process))
    keep = tmp_path / "demo"
    assert (
        main(["demo", "--keep", str(keep), "--steps", "2", "--after", "1", "--workers", "0"]) == 0
    )
    out = capsys.readouterr().out
    assert f"data kept in {keep}" in out and "the stream continued exactly" in out
    assert (keep / ".fpipe" / "info.yaml").exists() and (keep / "fpipe-demo-preview.png").exists()


def test_demo_preview_path(tmp_path):
    # --preview wins; --keep puts the picture in the kept folder; else beside the run's data
    args = types.SimpleNamespace(preview=None, keep=None)
    assert _demo.preview_path(args, tmp_path / "data") == tmp_path / "preview.png"
    args.keep = str(tmp_path / "kept")
    assert (
        _demo.preview_path(args, tmp_path / "kept") == tmp_path / "kept" / "fpipe-demo-preview.png"
    )
    args.preview = str(tmp_path / "p.png")
    assert _demo.preview_path(args, tmp_path / "kept") == tmp_path / "p.png"
