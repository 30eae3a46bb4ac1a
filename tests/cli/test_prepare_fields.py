"""One field-map syntax for prepare and loader, and settings checked before indexing."""

from __future__ import annotations

import pytest
import yaml

import fpipe
from fpipe.cli.main import main
from fpipe.core.errors import ConfigError
from fpipe.storage import open_dataset
from tests.storage.helpers import jpeg_bytes, make_image_caption_dataset, png_bytes, write_tar


def _prepare(path, *args):
    return main(["prepare", str(path), "--no-progress", *args])


def test_comma_alternatives_prepare_and_load(tmp_path):
    # half the samples have a jpg, half a png: `--field image=jpg,png` must load them all
    samples = [(f"{i:03d}", {("jpg" if i % 2 else "png"): (jpeg_bytes(8, 6) if i % 2
               else png_bytes(8, 6)), "txt": b"hi"}) for i in range(4)]  # fmt: skip
    write_tar(tmp_path / "s-0.tar", samples)
    assert _prepare(tmp_path, "--field", "image=jpg,png", "--field", "caption=txt") == 0
    cfg = yaml.safe_load((tmp_path / ".fpipe" / "dataset.yaml").read_text())
    assert cfg["field_map"]["image"] == ["jpg", "png"]  # stored as the YAML list form
    assert len(open_dataset(tmp_path)) == 4
    batch = next(iter(fpipe.get_train_dataset(tmp_path, batch_size=4, shuffle_buffer_size=None)))
    assert [tuple(im.shape) for im in batch.image] == [(3, 6, 8)] * 4


def test_loader_reads_comma_string_like_a_list(tmp_path):
    make_image_caption_dataset(tmp_path, shards=1, per_shard=2)
    fpipe.prepare_dataset(tmp_path, fields={"image": "jpg", "caption": "txt"})
    for image in ("png,jpg", ["png", "jpg"]):
        ds = fpipe.get_train_dataset(
            tmp_path, batch_size=2, field_map={"image": image, "caption": "txt"}
        )
        assert len(next(iter(ds)).image) == 2


@pytest.mark.parametrize("spec", ["jpg;png", "jpg|png", "jpg png", "jpg,", "json[a"])
def test_other_separators_are_refused(tmp_path, capsys, spec):
    make_image_caption_dataset(tmp_path, shards=1, per_shard=2)
    assert _prepare(tmp_path, "--field", f"image={spec}", "--field", "caption=txt") == 2
    err = capsys.readouterr().err
    assert "field 'image'" in err and "jpg,png" in err and not (tmp_path / ".fpipe").exists()


def test_extension_matching_no_member_lists_those_present(tmp_path, capsys):
    make_image_caption_dataset(tmp_path, shards=1, per_shard=2)
    assert _prepare(tmp_path, "--field", "image=jpeg", "--field", "caption=txt") == 2
    err = capsys.readouterr().err
    assert "'image'" in err and "jpeg" in err and "jpg" in err and "txt" in err
    assert not (tmp_path / ".fpipe").exists()


def test_unknown_sample_type_and_foreign_field_are_refused(tmp_path, capsys):
    make_image_caption_dataset(tmp_path, shards=1, per_shard=2)
    fields = ["--field", "image=jpg", "--field", "caption=txt"]
    assert _prepare(tmp_path, *fields, "--sample-type", "CaptionSample") == 2
    assert "CaptionSample" in capsys.readouterr().err
    assert _prepare(tmp_path, *fields, "--field", "label=json", "--sample-type",
                    "CaptioningSample") == 2  # fmt: skip
    assert "'label'" in capsys.readouterr().err
    assert not (tmp_path / ".fpipe").exists()


def test_no_flags_no_terminal_says_what_it_wrote(tmp_path, capsys):
    make_image_caption_dataset(tmp_path, shards=1, per_shard=2)
    assert _prepare(tmp_path) == 0
    out = capsys.readouterr().out
    assert "CrudeSample" in out and "--field" in out and "--sample-type" in out
    assert _prepare(tmp_path, "--field", "image=jpg", "--field", "caption=txt") == 0
    assert "sample_type CaptioningSample, fields image=jpg, caption=txt" in capsys.readouterr().out


_USER_MODULE = """
from dataclasses import dataclass
from typing import Any

from fpipe.samples import Sample


@dataclass
class PhotoNote(Sample):
    photo: Any
    note: str
    stars: int = 0
"""


def test_sample_type_from_the_users_module(tmp_path, monkeypatch, capsys):
    """`--sample-type package.module:Class`: the module named on the command line is
    imported, the field map checked against the class, dataset.yaml names it, and loading
    gives that class (the training code registers it; a name in dataset.yaml alone is never
    imported)."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "fp_user_types.py").write_text(_USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    make_image_caption_dataset(tmp_path / "d", shards=1, per_shard=4)
    ref = "fp_user_types:PhotoNote"
    assert _prepare(tmp_path / "d", "--field", "photo=jpg", "--sample-type", ref) == 2
    assert "does not map required field(s) note" in capsys.readouterr().err
    assert _prepare(tmp_path / "d", "--field", "photo=jpg", "--sample-type", "nope_mod:X") == 2
    assert "cannot import it" in capsys.readouterr().err
    fields = ["--field", "photo=jpg", "--field", "note=txt"]
    assert _prepare(tmp_path / "d", *fields, "--sample-type", ref) == 0
    assert "register the class there" in capsys.readouterr().out
    cfg = yaml.safe_load((tmp_path / "d" / ".fpipe" / "dataset.yaml").read_text())
    assert cfg["sample_type"] == "fp_user_types.PhotoNote"
    from fp_user_types import PhotoNote

    seen = []

    class Keep(fpipe.DefaultTaskEncoder):
        def encode_sample(self, sample):
            seen.append(sample)
            return sample

    ds = fpipe.get_train_dataset(tmp_path / "d", batch_size=2, task_encoder=Keep())
    batch = next(iter(fpipe.get_loader(ds, num_workers=0)))
    assert [type(s) for s in seen] == [PhotoNote, PhotoNote]
    assert all(n.startswith("caption number") for n in batch.note)


def test_unregistered_user_type_in_dataset_yaml_is_not_imported(tmp_path):
    make_image_caption_dataset(tmp_path, shards=1, per_shard=2)
    fpipe.prepare_dataset(tmp_path, fields={"image": "jpg", "caption": "txt"})
    yml = tmp_path / ".fpipe" / "dataset.yaml"
    yml.write_text(yml.read_text().replace("CaptioningSample", "os.Unregistered"))
    with pytest.raises(ConfigError, match=r"import os in your training code.*register"):
        next(iter(fpipe.get_train_dataset(tmp_path, batch_size=2)))
