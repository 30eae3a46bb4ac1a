import tempfile

import pytest
from PIL import Image

from fpipe.cli.main import main


@pytest.mark.slow  # a restore in a new process (imports torch)
def test_demo_shows_a_batch_a_preview_and_resumes_exactly(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the demo's folder goes
    png = tmp_path / "out" / "preview.png"
    argv = ["demo", "--steps", "4", "--after", "3", "--workers", "1", "--preview", str(png)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "\r" not in out  # plain lines when stdout is not a terminal
    assert "image     uint8[8, 3, 64, 64]" in out and "first caption: 'a " in out
    assert f"preview of the first 16 samples: {png}" in out
    with Image.open(png) as img:
        assert img.format == "PNG" and img.width > 300
    assert "first sample key     pixels sha256" in out  # every column labelled
    assert "the stream continued exactly" in out
    assert out.count(" yes\n") == 3
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # the data folder was removed


@pytest.mark.slow
def test_demo_keep_keeps_the_data(tmp_path, capsys):
    keep = tmp_path / "demo"
    assert (
        main(["demo", "--keep", str(keep), "--steps", "2", "--after", "1", "--workers", "0"]) == 0
    )
    assert f"data kept in {keep}" in capsys.readouterr().out
    assert (keep / ".fpipe" / "info.yaml").exists() and (keep / "fpipe-demo-preview.png").exists()
