"""Energon's media metadata on fpipe (``megatron.energon.media`` and the media test of its
``tests/test_crudedataset.py``): a cooker asks its stores for ``get_media_metadata(name)``
(``ImageMetadata`` / ``AVMetadata``); ``prepare_filesystem_dataset`` and
``BaseWebdatasetFactory.prepare_dataset(media_filter=...)`` store the records where Energon
does, and a store without them computes the same record from the file's bytes."""

from __future__ import annotations

import io
import json
import sqlite3
import textwrap

import numpy as np
import pytest
import yaml
from PIL import Image

from fpipe.energon import (
    AVMetadata,
    BaseWebdatasetFactory,
    Cooker,
    DefaultTaskEncoder,
    ImageMetadata,
    MediaFilterConfig,
    MediaFilterStrategy,
    TextSample,
    basic_sample_keys,
    cooker,
    get_loader,
    get_val_dataset,
    prepare_filesystem_dataset,
)
from tests.decode.av_helpers import write_audio, write_video
from tests.energon.energon_folder import CRUDE_CONFIG as CRUDE
from tests.storage.helpers import write_tar


def _image(size, fmt):
    buf = io.BytesIO()
    Image.fromarray(np.zeros((size[1], size[0], 3), np.uint8)).save(buf, format=fmt)
    return buf.getvalue()


FILES = {
    "image000.jpg": _image((32, 16), "JPEG"),
    "image001.png": _image((24, 24), "PNG"),
    "audio001.wav": write_audio(None, seconds=2.0, sample_rate=16000),
    "video001.mp4": write_video(None, num_frames=30, fps=15, width=64, height=48),
    "notes.txt": b"not media",
}
WANT = [
    "IMG-32x16-JPEG",
    "IMG-24x24-PNG",
    "AUDIO-2.0s@16000Hz",
    "VIDEO-64x48@15.0fps-2.0s",
]


def _describe(meta) -> str:
    if isinstance(meta, ImageMetadata):
        return f"IMG-{meta.width}x{meta.height}-{meta.format}"
    assert isinstance(meta, AVMetadata)
    if meta.video_fps is not None:
        return (
            f"VIDEO-{meta.video_width}x{meta.video_height}@{meta.video_fps}fps-"
            f"{meta.video_duration:0.1f}s"
        )
    return f"AUDIO-{meta.audio_duration:0.1f}s@{meta.audio_sample_rate}Hz"


@cooker(need_primary=True)
def cook_media(sample: dict, primary, media) -> TextSample:
    name = sample["__sources__"][0].file_names[0]
    both = [_describe(primary.get_media_metadata(name)), _describe(media.get_media_metadata(name))]
    return TextSample(**basic_sample_keys(sample), text="|".join(both))


class MediaEncoder(DefaultTaskEncoder):
    cookers = [Cooker(cook_media)]


def _build(root, *, prepare_media: bool):
    wds, folder = root / "wds", root / "fs"
    (wds / "parts").mkdir(parents=True)
    media = [(n, d) for n, d in FILES.items() if n != "notes.txt"]
    write_tar(wds / "parts/data-0.tar", [(n.split(".")[0], {n.split(".")[1]: d}) for n, d in media])
    filt = MediaFilterConfig(strategy=MediaFilterStrategy.EXTENSION) if prepare_media else None
    BaseWebdatasetFactory.prepare_dataset(
        wds,
        ["parts/data-0.tar"],
        split_parts_ratio=[("train", 1.0)],
        shuffle_seed=None,
        media_filter=filt,
    )
    (wds / ".nv-meta").mkdir(exist_ok=True)
    (wds / ".nv-meta" / "dataset.yaml").write_text(yaml.dump(CRUDE))
    (folder / "sub").mkdir(parents=True)
    for name, data in FILES.items():
        (folder / name).write_bytes(data)
    if prepare_media:
        n = prepare_filesystem_dataset(folder, MediaFilterConfig(MediaFilterStrategy.EXTENSION))
        assert n == 4  # notes.txt is not media
    mds = root / "media.yaml"
    mds.write_text(
        textwrap.dedent(
            """\
            splits:
              train:
                path: wds
                aux:
                  media: filesystem://fs
            """
        )
    )
    return mds


def _descriptions(mds):
    ds = get_val_dataset(mds, split="train", batch_size=1, task_encoder=MediaEncoder())
    with get_loader(ds) as loader:
        return [batch.text[0] for batch in loader]


@pytest.mark.parametrize("prepare_media", [True, False])
def test_stores_answer_media_metadata_stored_or_computed(tmp_path, prepare_media):
    mds = _build(tmp_path, prepare_media=prepare_media)
    stored = (
        sqlite3.connect(tmp_path / "fs" / ".nv-meta" / "index.sqlite") if prepare_media else None
    )
    got = _descriptions(mds)
    assert sorted(got) == sorted(f"{w}|{w}" for w in WANT)
    if stored is not None:  # Energon's table, as Energon's prepare writes it
        rows = dict(stored.execute("SELECT entry_key, metadata_json FROM media_metadata"))
        assert json.loads(rows["image000.jpg"]) == {
            "width": 32,
            "height": 16,
            "format": "JPEG",
            "mode": "RGB",
        }
        wds = sqlite3.connect(tmp_path / "wds" / ".nv-meta" / "index.sqlite")
        keys = {k for (k,) in wds.execute("SELECT entry_key FROM media_metadata")}
        assert keys == {"image000.jpg", "image001.png", "audio001.wav", "video001.mp4"}


def test_stored_records_are_what_the_store_reads(tmp_path):
    mds = _build(tmp_path, prepare_media=True)
    db = sqlite3.connect(tmp_path / "fs" / ".nv-meta" / "index.sqlite")
    with db:  # a stored record wins over computing (it is Energon's prepared value)
        db.execute(
            "UPDATE media_metadata SET metadata_json = ? WHERE entry_key = 'image001.png'",
            (json.dumps({"width": 7, "height": 7, "format": "PNG", "mode": "RGB"}),),
        )
    assert "IMG-24x24-PNG|IMG-7x7-PNG" in _descriptions(mds)


def test_media_filters_and_errors(tmp_path):
    by_glob = MediaFilterConfig.parse("*.png,*.wav", header=False, extension=False)
    assert by_glob.should_consider_media("a.PNG") and not by_glob.should_consider_media("a.jpg")
    header = MediaFilterConfig(MediaFilterStrategy.HEADER)
    assert header.extract_metadata(FILES["image001.png"], filename="no_extension") == ImageMetadata(
        width=24, height=24, format="PNG", mode="RGB"
    )
    assert header.extract_metadata(b"plain text", filename="x.bin") is None
    with pytest.raises(ValueError, match="exactly one"):
        MediaFilterConfig.parse(None, header=True, extension=True)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="No media files"):
        prepare_filesystem_dataset(
            tmp_path / "empty", MediaFilterConfig(MediaFilterStrategy.EXTENSION)
        )
