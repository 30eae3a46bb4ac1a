"""Build small WebDataset shards, Energon folders and tables for tests (importable by others).

from tests.storage.helpers import make_image_caption_dataset
expected = make_image_caption_dataset(tmp_path, shards=2, per_shard=4)
"""

from __future__ import annotations

import gzip
import io
import json
import struct
import tarfile
from pathlib import Path

__all__ = [
    "file_reads",
    "SampleSpec",
    "jpeg_bytes",
    "make_energon_dataset",
    "make_image_caption_dataset",
    "png_bytes",
    "write_tar",
    "write_tar_idx",
]

#: (key, {ext: bytes}) of one sample as written to a shard.
SampleSpec = tuple[str, dict[str, bytes]]


def jpeg_bytes(width: int, height: int, color: tuple[int, int, int] = (200, 30, 60)) -> bytes:
    """A small valid JPEG of the given size."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buf, format="JPEG", quality=70)
    return buf.getvalue()


def png_bytes(width: int, height: int) -> bytes:
    """A small valid PNG of the given size."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("L", (width, height), 128).save(buf, format="PNG")
    return buf.getvalue()


def write_tar(
    path: str | Path,
    samples: list[SampleSpec],
    *,
    fmt: int = tarfile.GNU_FORMAT,
    compress: bool = False,
    dirs: bool = False,
) -> Path:
    """Write samples as a tar shard (``compress`` gives ``.tar.gz`` content).

    Members are written in sample order, ``<key>.<ext>``; ``dirs`` adds directory entries for
    keys with folders.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=fmt) as tf:
        seen_dirs: set[str] = set()
        for key, members in samples:
            if dirs and "/" in key:
                d = key.rsplit("/", 1)[0]
                if d not in seen_dirs:
                    seen_dirs.add(d)
                    ti = tarfile.TarInfo(d)
                    ti.type = tarfile.DIRTYPE
                    tf.addfile(ti)
            for ext, data in members.items():
                ti = tarfile.TarInfo(f"{key}.{ext}")
                ti.size = len(data)
                ti.mtime = 1_700_000_000
                tf.addfile(ti, io.BytesIO(data))
    data = raw.getvalue()
    path.write_bytes(gzip.compress(data, mtime=0) if compress else data)
    return path


def image_caption_samples(start: int, count: int, *, with_json: bool = True) -> list[dict]:
    """Expected content of samples ``start .. start+count-1`` (varied image sizes)."""
    out = []
    for i in range(start, start + count):
        w, h = 8 + (i * 7) % 40, 6 + (i * 5) % 30
        caption = f"caption number {i} " + "é" * (i % 3)
        members = {"jpg": jpeg_bytes(w, h), "txt": caption.encode("utf-8")}
        if with_json:
            members["json"] = json.dumps(
                {"caption": caption, "score": i / 10, "tags": ["a"] * (i % 4)}
            ).encode()
        out.append(
            {"key": f"{i:06d}", "members": members, "width": w, "height": h, "caption": caption}
        )
    return out


def make_image_caption_dataset(
    root: str | Path,
    *,
    shards: int = 2,
    per_shard: int = 4,
    pattern: str = "shard-{:04d}.tar",
    with_json: bool = True,
) -> list[dict]:
    """Write ``shards`` image-caption shards under ``root``; returns expected samples in order.

    Each expected sample has ``key`` (``"<shard stem>/<key>"``), ``members``, ``width``,
    ``height``, ``caption`` and ``shard`` (name relative to root).
    """
    root = Path(root)
    expected = []
    for s in range(shards):
        name = pattern.format(s)
        samples = image_caption_samples(s * per_shard, per_shard, with_json=with_json)
        write_tar(root / name, [(x["key"], x["members"]) for x in samples])
        stem = name[: -len(".tar")]
        for x in samples:
            expected.append({**x, "key": f"{stem}/{x['key']}", "shard": name})
    return expected


def prepared_image_caption(root: Path, split: str):
    """A 3-shard image + caption dataset under ``root``, prepared with ``split``, with the
    per-process parse cache cleared before and after (a fixture's body: ``yield from``)."""
    from fpipe.storage.prepare import prepare_dataset
    from fpipe.storage.read import parsed_files

    make_image_caption_dataset(root, shards=3, per_shard=2, with_json=False)
    prepare_dataset(root, fields={"image": "jpg", "caption": "txt"}, split=split)
    parsed_files.clear()
    yield root
    parsed_files.clear()


def write_tar_idx(shard: str | Path) -> None:
    """Write ``<shard>.idx`` as Energon does: little-endian uint64 offsets of every sample's
    first tar header, plus the end offset of the last sample."""
    offsets, last = [], None
    with tarfile.open(shard) as tf:
        for m in tf:
            base = m.name.split(".", 1)[0]
            if base != last:
                offsets.append(m.offset)
                last = base
        offsets.append(tf.offset)
    Path(f"{shard}.idx").write_bytes(struct.pack(f"<{len(offsets)}Q", *offsets))


def make_energon_dataset(
    root: str | Path,
    *,
    shards: int = 2,
    per_shard: int = 4,
    split: dict[str, list[str]] | None = None,
    exclude: list[str] | None = None,
    info_json: bool = False,
) -> list[dict]:
    """A folder as ``energon prepare`` leaves it: shards/, ``.tar.idx`` files and ``.nv-meta``.

    ``.tar.idx`` holds little-endian uint64 offsets of every sample's first tar header, plus
    the end offset of the last sample, as Energon writes it.
    """
    import yaml

    root = Path(root)
    expected = make_image_caption_dataset(
        root, shards=shards, per_shard=per_shard, pattern="shards/part_{:03d}.tar"
    )
    counts = {}
    for s in range(shards):
        name = f"shards/part_{s:03d}.tar"
        write_tar_idx(root / name)
        counts[name] = per_shard
    meta = root / ".nv-meta"
    meta.mkdir()
    (meta / "dataset.yaml").write_text(
        yaml.safe_dump(
            {
                "sample_type": {"__module__": "megatron.energon", "__class__": "CaptioningSample"},
                "field_map": {"image": "jpg", "caption": "txt"},
            }
        )
    )
    split = split or {"train": list(counts)}
    (meta / "split.yaml").write_text(
        yaml.safe_dump({"split_parts": split, "exclude": exclude or []})
    )
    info = {"energon_version": "6.0.0", "shard_counts": counts}
    if info_json:
        (meta / ".info.json").write_text(json.dumps(info))
    else:
        (meta / ".info.yaml").write_text(yaml.safe_dump(info))
    return expected


def file_reads(files, read) -> tuple[object, list[tuple[str, int, int]]]:
    """``read()``'s result and the ``(path, offset, size)`` reads it made through the file
    layer ``files`` (a :class:`~fpipe.storage.read.reader.FileCache`): each ``pread`` call and
    each range given to ``pread_many``."""
    made: list[tuple[str, int, int]] = []
    plain, many = files.pread, files.pread_many
    files.pread = lambda *r: made.append(r) or plain(*r)
    files.pread_many = lambda rs: made.extend(rs) or many(rs)
    try:
        return read(), made
    finally:
        del files.pread, files.pread_many
