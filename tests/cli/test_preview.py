"""`fpipe preview` (image grid, video frame strips, text excerpts) and the richer `fpipe info`;
both read the index and payloads without torch for images and text."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fpipe.cli.main import main
from fpipe.core.errors import ConfigError
from fpipe.preview import render_preview
from fpipe.storage import prepare_dataset
from tests.distributed.helpers import make_text_dataset
from tests.storage.helpers import make_image_caption_dataset, write_tar

ROOT = Path(__file__).resolve().parents[2]
RED = (200, 30, 60)  # the colour of every test JPEG


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("preview_images")
    make_image_caption_dataset(d, shards=2, per_shard=3)
    prepare_dataset(d, fields={"image": "jpg", "caption": "txt"}, sample_type="CaptioningSample")
    return d


def _near(img: Image.Image, colour, tol: int = 40) -> int:
    a = np.asarray(img.convert("RGB")).astype(int)
    return int((np.abs(a - np.array(colour)).max(axis=2) < tol).sum())


def _dark(img: Image.Image) -> int:
    return int((np.asarray(img.convert("L")) < 80).sum())


def test_preview_cli_writes_a_grid_png(images, tmp_path, capsys):
    out = tmp_path / "grid.png"
    assert main(["preview", str(images), "--n", "4", "--out", str(out)]) == 0
    assert f"wrote {out} (4 samples of split 'train')" in capsys.readouterr().out
    with Image.open(out) as img:
        assert img.format == "PNG"
        assert img.size == (2 * 194 + 2, img.height) and img.height > 2 * 192  # 2 x 2 cells
        assert _near(img, RED) > 4 * 40  # the four pictures are drawn...
        assert _dark(img) > 4 * 100  # ...and the keys and captions under them
        assert len(img.getcolors(1 << 20)) > 20  # not a blank canvas


def test_preview_text_and_video(tmp_path):
    text = make_text_dataset(tmp_path / "text", shards=1, per_shard=3)
    img = render_preview(text, n=3)
    assert _dark(img) > 300 and img.width >= 2 * 192  # text cells are two pictures wide

    from tests.decode.av_helpers import write_video

    d = tmp_path / "video"
    clip = write_video(None, num_frames=12, fps=12, width=32, height=24, gop=6)
    write_tar(d / "v.tar", [(f"{i:03d}", {"mp4": clip, "txt": b"a clip"}) for i in range(2)])
    prepare_dataset(
        d, fields={"video": "mp4", "caption": "txt"}, sample_type="CaptionedVideoSample"
    )
    strip = render_preview(d, n=2)
    panel = np.asarray(strip)[30:120, 10:370]  # the picture band of the first cell
    assert len(np.unique(panel.reshape(-1, 3), axis=0)) > 10  # frames, not the empty panel


def test_preview_errors(images, tmp_path, capsys):
    with pytest.raises(ConfigError, match="no samples to preview"):
        render_preview(images, n=0)
    assert main(["preview", str(tmp_path / "missing"), "--out", str(tmp_path / "x.png")]) == 2
    assert "no such dataset" in capsys.readouterr().err


def test_info_shows_shard_counts_coverage_and_histograms(images, capsys):
    assert main(["info", str(images), "--shards"]) == 0
    out = capsys.readouterr().out
    assert "  shard-0000.tar  3 samples" in out and "  shard-0001.tar  3 samples" in out
    assert "samples with each field: image 6/6, caption 6/6" in out
    assert "image.width: min " in out and "caption.chars histogram:" in out
    assert "image sizes (width x height: samples):" in out  # 6 distinct sizes: listed


def test_plan_info_and_image_preview_do_not_import_torch(images, tmp_path):
    code = (
        "import sys, json\n"
        "from fpipe.cli.main import main\n"
        "rcs = [main(['info', sys.argv[1]]),\n"
        "       main(['plan', sys.argv[1], '--step', '1', '--batch-size', '2']),\n"
        "       main(['preview', sys.argv[1], '--out', sys.argv[2]])]\n"
        "print(json.dumps([rcs, 'torch' in sys.modules]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(images), str(tmp_path / "p.png")],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rcs, torch_imported = json.loads(proc.stdout.strip().splitlines()[-1])
    assert rcs == [0, 0, 0] and not torch_imported
