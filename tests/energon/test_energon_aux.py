"""Energon's metadataset ``aux:`` on fpipe: a crude dataset's cookers get auxiliary file stores
as keywords (``cook(sample, **aux)``), read files from them by name (decoded by extension),
and, with ``@cooker(need_primary=True)``, their own dataset as ``primary``.

From Energon 7.4's ``metadataset_v2.py`` (a plain ``aux`` path is a prepared dataset whose files
are ``<key>.<member>``; ``filesystem://dir`` a folder, relative to the metadataset file;
``aux`` is refused on a nested metadataset), ``task_encoder/cooking.py`` and
``cache/file_store.py`` (``store.get(name, sample)`` adds the file's ``SourceInfo`` to the
sample's ``__sources__``).
"""

from __future__ import annotations

import dataclasses
import io
import textwrap
from typing import Any

import numpy as np
import pytest
from PIL import Image

from fpipe.core.errors import ConfigError
from fpipe.energon import (
    Cooker,
    DefaultTaskEncoder,
    Sample,
    basic_sample_keys,
    cooker,
    get_loader,
    get_val_dataset,
)
from tests.energon.energon_folder import CRUDE_CONFIG as CRUDE
from tests.energon.energon_folder import TEXT_CONFIG as TEXT
from tests.energon.energon_folder import make_plain_energon_folder


@dataclasses.dataclass
class Cooked(Sample):
    n: int
    size: Any
    other: Any


def _size(img) -> tuple[int, int]:
    """(height, width) of a decoded image (a CHW tensor or array, or a PIL image)."""
    if hasattr(img, "shape"):
        return tuple(int(x) for x in img.shape[-2:])
    return img.size[1], img.size[0]


@cooker
def cook_images(sample: dict, images, texts) -> Cooked:
    n = sample["json"]["n"]
    img = images.get(f"img/{n}.png", sample)  # by a name in the sample's json
    other = texts.get(f"{n % 4:06d}.txt", sample)  # a prepared dataset, by key.member
    return Cooked(**basic_sample_keys(sample), n=n, size=_size(img), other=other)


@cooker(need_primary=True)
def cook_next(sample: dict, primary) -> Cooked:
    n = sample["json"]["n"]
    nxt = primary.get(f"{(n + 1) % 6:06d}.txt", sample)
    return Cooked(**basic_sample_keys(sample), n=n, size=None, other=nxt)


@cooker
def cook_escape(sample: dict, images, **_: Any) -> Cooked:
    return Cooked(**basic_sample_keys(sample), n=0, size=images.get("../secret.png"), other=None)


class AuxEncoder(DefaultTaskEncoder):
    cookers = [Cooker(cook_images)]


def _png(width: int, height: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((height, width, 3), 7, np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("aux")
    make_plain_energon_folder(root / "crude", CRUDE)  # json {"n": 0..5}
    make_plain_energon_folder(root / "texts", TEXT, shards=1, per_shard=4)  # txt 10..13
    (root / "media" / "img").mkdir(parents=True)
    for n in range(6):
        (root / "media" / "img" / f"{n}.png").write_bytes(_png(n + 1, 2))
    (root / "secret.png").write_bytes(_png(1, 1))
    return root


def _mds(root, name, body):
    path = root / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def _cooked(path, encoder, num_workers=0):
    ds = get_val_dataset(path, split="train", batch_size=1, task_encoder=encoder)
    out, sources = [], []
    with get_loader(ds, num_workers=num_workers) as loader:
        for batch in loader:  # batch_size=1: one sample's fields, collated
            out.append((batch.n[0], batch.size[0], batch.other[0]))
            sources += list(batch.__sources__[0])
    return out, sources


AUX_MDS = """\
    __module__: megatron.energon
    __class__: MetadatasetV2
    splits:
      train:
        path: crude
        aux:
          images: filesystem://media
          texts: texts
    """


def test_a_cooker_reads_files_from_aux_stores_by_name(root):
    samples, sources = _cooked(_mds(root, "aux.yaml", AUX_MDS), AuxEncoder())
    assert sorted(samples) == [(n, (2, n + 1), f"{n % 4 + 10}") for n in range(6)]  # decoded
    files = {src.file_names[0] for src in sources}
    assert {"img/0.png", "000001.txt"} <= files  # store.get(name, sample) records the source


def test_aux_output_does_not_depend_on_worker_count(root):
    path = _mds(root, "aux.yaml", AUX_MDS)
    one = _cooked(path, AuxEncoder())
    two = _cooked(path, AuxEncoder(), num_workers=2)
    assert one == two


def test_need_primary_gives_the_cooker_its_own_dataset(root):
    class Enc(DefaultTaskEncoder):
        cookers = [Cooker(cook_next)]

    samples, _ = _cooked(_mds(root, "plain.yaml", "splits: {train: {path: crude}}\n"), Enc())
    assert sorted((n, o) for n, _, o in samples) == [(n, f"{(n + 1) % 6 + 10}") for n in range(6)]


def test_aux_names_cannot_leave_the_store(root):
    class Enc(DefaultTaskEncoder):
        cookers = [Cooker(cook_escape)]

    with pytest.raises(ConfigError, match=r"'\.\./secret\.png' leaves"):
        _cooked(_mds(root, "aux.yaml", AUX_MDS), Enc())


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("splits: {train: {path: crude, aux: {images: filesystem://nowhere}}}", "not a folder"),
        ("splits: {train: {path: crude, aux: {primary: texts}}}", "identifier other than"),
        ("splits: {train: {path: crude, aux: {t: 'ftp://host/x'}}}", "does not read ftp://"),
        ("splits: {train: {path: crude, aux: {t: 'filesystem+media'}}}", "followed by a URL"),
        ("splits: {train: {path: crude, aux: [texts]}}", "must map names"),
        ("splits: {train: {path: plain.yaml, aux: {t: texts}}}", "aux applies to a dataset"),
        ("splits: {train: {path: texts, aux: {t: texts}}}", "aux applies to crude"),
    ],
)
def test_bad_aux_entries_are_refused_naming_the_file(root, body, match):
    _mds(root, "plain.yaml", "splits: {train: {path: crude}}\n")
    path = _mds(root, "bad.yaml", body + "\n")
    with pytest.raises(ConfigError, match=match) as e:
        _cooked(path, AuxEncoder())
    assert "bad.yaml" in str(e.value)
