"""Open arguments given once for every dataset of a metadataset (``open_kwargs=``, the CLI's
``--media-root``): each dataset takes those its layout takes, and one no dataset takes is
refused by name."""

from __future__ import annotations

import json

import pytest

import fpipe
from fpipe.cli.main import main
from fpipe.core.errors import ConfigError
from fpipe.storage import open_dataset, prepare_dataset
from tests.storage.helpers import jpeg_bytes, make_energon_dataset


@pytest.fixture
def mixed(tmp_path):
    """A metadataset of a prepared table whose media lie beside its folder (opened with
    ``media_root``), an Energon folder and a table file; and that media folder."""
    media = tmp_path / "media"
    media.mkdir()
    (media / "0.jpg").write_bytes(jpeg_bytes(9, 5))
    (tmp_path / "meta").mkdir()
    row = json.dumps({"image": "0.jpg", "caption": "beside"}) + "\n"
    (tmp_path / "meta" / "t.jsonl").write_text(row)
    prepare_dataset(tmp_path / "meta" / "t.jsonl", root=media)
    make_energon_dataset(tmp_path / "e", shards=1, per_shard=2)
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "0.jpg").write_bytes(jpeg_bytes(9, 5))
    (tmp_path / "raw" / "t.jsonl").write_text(row.replace("beside", "raw"))
    entries = "".join(
        f"      - weight: 1\n        path: {tmp_path / p}\n" for p in ("meta", "e", "raw/t.jsonl")
    )
    yaml_file = tmp_path / "m.yaml"
    yaml_file.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\n"
        f"splits:\n  train:\n    blend:\n{entries}"
    )
    return yaml_file, media


def test_media_root_opens_the_prepared_table_of_a_mixed_metadataset(mixed):
    path, media = mixed
    kw = dict(batch_size=1, seed=0, shuffle_buffer_size=None, max_samples_per_sequence=None)
    ds = fpipe.get_train_dataset(str(path), open_kwargs={"media_root": str(media)}, **kw)
    sources = ds.materializer.sources
    assert [s.open_kwargs for s in sources] == [{"media_root": str(media)}, {}, {}]
    table = open_dataset(sources[0].path, **sources[0].open_kwargs)  # as a worker opens it
    assert table.read(0)["image"] == (media / "0.jpg").read_bytes()
    with pytest.raises(ConfigError, match=r"'\.\./media' leads out"):  # without it: refused
        fpipe.get_train_dataset(str(path), **kw)


def test_an_open_argument_no_dataset_takes_is_refused_by_name(mixed):
    path, media = mixed
    kw = dict(batch_size=1, seed=0, shuffle_buffer_size=None, max_samples_per_sequence=None)
    bad = {"media_root": str(media), "index_dir": str(media)}  # a URL's: none is one
    with pytest.raises(ConfigError, match=rf"{path}: open argument\(s\) \['index_dir'\]"):
        fpipe.get_train_dataset(str(path), open_kwargs=bad, **kw)
    with pytest.raises(ConfigError, match=r"\['media_root'\] do not apply to this dataset"):
        open_dataset(path.parent / "e", media_root=str(media))  # one dataset: named too


def test_info_of_a_mixed_metadataset_takes_media_root(mixed, capsys):
    path, media = mixed
    assert main(["info", str(path)]) == 2
    assert "'../media' leads out" in capsys.readouterr().err
    assert main(["info", str(path), "--media-root", str(media)]) == 0
    assert "split train: blend, 3 dataset(s)" in capsys.readouterr().out
