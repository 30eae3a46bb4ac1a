"""Containment: a path a data file names is read only from inside its dataset's root.

A hostile dataset names a file outside its folder (an absolute path, ``..``, a ``file://`` URL,
a symbolic link leading out) in every place data names a path: a Parquet or Arrow row's media
struct, a table's media column, a shard in Energon's ``.info.yaml`` or in an index, a link in
the dataset folder or inside a tar shard, a file in Hugging Face's ``state.json``, a split
folder, a ``split.yaml`` entry, a ``split_config`` file, a shard under a ``file://`` URL. Each
is refused with an fpipe error naming the file, the row (sample key) and the path, counted by
``fpipe prepare`` (and by the loader's error policy at read time), and the outside file is
never opened: every ``open`` is watched, and the outside file's bytes never come back.
"""

from __future__ import annotations

import builtins
import io
import json
import os
import pickle
import shutil
import tarfile
from pathlib import Path

import pytest
import yaml

import fpipe
from fpipe.core.errors import BadSampleError, ConfigError
from fpipe.storage import open_dataset, prepare_dataset
from fpipe.storage.prepare.check import check_dataset
from tests.optional import skip_unless_installed
from tests.storage.helpers import (
    jpeg_bytes,
    make_energon_dataset,
    make_image_caption_dataset,
    write_tar_idx,
)

SECRET = jpeg_bytes(13, 7, (1, 2, 3))  # a valid image: it would be indexed and decoded
GOOD = jpeg_bytes(9, 5)


@pytest.fixture
def outside(tmp_path) -> Path:
    """A folder beside the dataset holding ``secret.jpg``."""
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.jpg").write_bytes(SECRET)
    return d


@pytest.fixture
def opened(monkeypatch) -> list[str]:
    """Real paths of every file opened for reading with ``open`` (``Path.read_bytes`` and
    ``gzip.open`` included) while the test runs (files the test writes are not reads)."""
    seen: list[str] = []
    real = builtins.open

    def spy(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, bytes, os.PathLike)) and not set(mode) & set("wax"):
            seen.append(os.path.realpath(file))
        return real(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy)
    monkeypatch.setattr(io, "open", spy)
    return seen


def _never_opened(opened: list[str], outside: Path) -> None:
    real = os.path.realpath(outside)
    assert not [p for p in opened if p == real or p.startswith(real + os.sep)]


def _hostile(ds: Path, outside: Path) -> list[str]:
    """Names of ``outside/secret.jpg`` from inside ``ds``: absolute, ``..``, a URL, links."""
    ds.mkdir(exist_ok=True)
    os.symlink(outside / "secret.jpg", ds / "link.jpg")
    os.symlink(outside, ds / "linkdir", target_is_directory=True)
    return [
        str(outside / "secret.jpg"),
        "../outside/secret.jpg",
        "img/../../outside/secret.jpg",
        f"file://{outside / 'secret.jpg'}",
        "link.jpg",
        "linkdir/secret.jpg",
    ]


# -- Parquet and Arrow rows ---------------------------------------------------------------------


def _media_table(paths: list[str | None]):
    import pyarrow as pa

    struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    cells = [
        {"bytes": GOOD, "path": None} if p is None else {"bytes": None, "path": p} for p in paths
    ]
    return pa.table(
        {
            "image": pa.array(cells, struct),
            "text": pa.array([f"caption {i}" for i in range(len(paths))]),
        }
    )


def _write_rows(ds: Path, paths: list[str | None], fmt: str) -> str:
    """One file of rows whose image structs name ``paths`` (None: the bytes are embedded):
    ``data.parquet``, or a ``save_to_disk`` folder's ``data-00000-of-00001.arrow``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = _media_table(paths)
    if fmt == "parquet":
        pq.write_table(table, ds / "data.parquet")
        return "data.parquet"
    name = "data-00000-of-00001.arrow"
    with pa.ipc.new_stream(str(ds / name), table.schema) as w:
        w.write_table(table)
    (ds / "state.json").write_text(json.dumps({"_data_files": [{"filename": name}]}))
    return name


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_media_struct_paths_leading_out_are_refused_at_prepare(tmp_path, outside, opened, fmt):
    skip_unless_installed("pyarrow")
    ds = tmp_path / "ds"
    hostile = _hostile(ds, outside)
    (ds / "img").mkdir()
    (ds / "img" / "ok.jpg").write_bytes(GOOD)
    name = _write_rows(ds, [None, "img/ok.jpg", *hostile], fmt)
    report = prepare_dataset(ds)
    assert report.num_samples == 2  # the embedded row and the one inside the folder
    stem = name.rsplit(".", 1)[0]
    assert [(p.path, p.key) for p in report.problems] == [
        (name, f"{stem}/{i}") for i in range(2, 2 + len(hostile))
    ]
    for p, path in zip(report.problems, hostile):
        assert f"path {path!r} leaves the dataset folder" in p.reason
    assert len((ds / ".fpipe" / "problems.jsonl").read_text().splitlines()) == len(hostile)
    _never_opened(opened, outside)
    got = open_dataset(ds)
    assert [got.read(i)["image"] for i in range(2)] == [GOOD, GOOD]


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_media_struct_paths_leading_out_are_refused_at_read(tmp_path, outside, opened, fmt):
    skip_unless_installed("pyarrow")
    ds = tmp_path / "ds"
    hostile = _hostile(ds, outside)
    (ds / "img").mkdir()
    for i in range(len(hostile)):
        (ds / "img" / f"{i}.jpg").write_bytes(GOOD)
    _write_rows(ds, [f"img/{i}.jpg" for i in range(len(hostile))], fmt)
    prepare_dataset(ds)
    name = _write_rows(ds, hostile, fmt)  # the same rows, now naming the outside file
    got = open_dataset(ds, shard_check="off")
    stem = name.rsplit(".", 1)[0]
    for i, path in enumerate(hostile):
        with pytest.raises(BadSampleError) as e:
            got.read(i)
        assert e.value.path.endswith(name) and e.value.key == f"{stem}/{i}"
        assert f"path {path!r} leaves the dataset folder" in e.value.reason
    _never_opened(opened, outside)
    if fmt == "parquet":  # the loader's error policy: each left out and counted
        kw = dict(batch_size=2, seed=0, num_epochs=1, error_policy="skip")
        loader = fpipe.get_loader(  # in this process: its opens are watched
            fpipe.get_train_dataset(str(ds), open_kwargs={"shard_check": "off"}, **kw),
            num_workers=0,
        )
        assert [b for b in loader if b is not None and len(b.caption)] == []
        assert loader.stats().skipped == len(hostile)
        _never_opened(opened, outside)


def test_media_path_under_a_url_root_is_refused():
    from fpipe.storage.paths import PathEscapeError
    from fpipe.storage.read.parquet import media_file

    with pytest.raises(PathEscapeError, match="local datasets only"):
        media_file("s3://bucket/ds", "img/0.jpg", "image")
    assert media_file("/data/ds", "img/0.jpg", "image") == "/data/ds/img/0.jpg"


# -- Hugging Face folders -----------------------------------------------------------------------


def _arrow_file(path: Path) -> None:
    import pyarrow as pa

    table = _media_table([None, None])
    with pa.ipc.new_stream(str(path), table.schema) as w:
        w.write_table(table)


def test_state_json_entries_leading_out_are_refused(tmp_path, outside, opened):
    skip_unless_installed("pyarrow")
    ds = tmp_path / "ds"
    ds.mkdir()
    _arrow_file(outside / "x.arrow")
    for entry in ("../outside/x.arrow", str(outside / "x.arrow")):
        (ds / "state.json").write_text(json.dumps({"_data_files": [{"filename": entry}]}))
        with pytest.raises(ConfigError, match=r"state\.json: bad data file entry"):
            prepare_dataset(ds)
    # a listed file that is a link out of the folder: left out, reported, never opened
    _arrow_file(ds / "data-00000-of-00002.arrow")
    os.symlink(outside / "x.arrow", ds / "data-00001-of-00002.arrow")
    files = [{"filename": f"data-0000{k}-of-00002.arrow"} for k in range(2)]
    (ds / "state.json").write_text(json.dumps({"_data_files": files}))
    report = prepare_dataset(ds)
    assert report.num_samples == 2 and len(report.problems) == 1
    p = report.problems[0]
    assert (p.path, p.key) == ("data-00001-of-00002.arrow", "data-00001-of-00002")
    assert "outside the dataset folder" in p.reason
    assert open_dataset(ds).shards == ("data-00000-of-00002.arrow",)
    _never_opened(opened, outside)


def test_cache_folder_file_linking_out_is_refused(tmp_path, outside, opened):
    skip_unless_installed("pyarrow")
    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / "dataset_info.json").write_text("{}")
    _arrow_file(ds / "x-train.arrow")
    _arrow_file(outside / "x.arrow")
    os.symlink(outside / "x.arrow", ds / "x-test.arrow")
    report = prepare_dataset(ds)
    assert report.num_samples == 2
    assert [(p.path, p.key) for p in report.problems] == [("x-test.arrow", "x-test")]
    _never_opened(opened, outside)


def test_dataset_dict_split_folder_linking_out_is_refused(tmp_path, outside, opened):
    ds = tmp_path / "ds"
    ds.mkdir()
    (outside / "train").mkdir()
    (outside / "train" / "state.json").write_text('{"_data_files": [{"filename": "a.arrow"}]}')
    os.symlink(outside / "train", ds / "train", target_is_directory=True)
    (ds / "dataset_dict.json").write_text('{"splits": ["train"]}')
    with pytest.raises(ConfigError, match="dataset_dict.json: split 'train' leaves the dataset"):
        prepare_dataset(ds)
    _never_opened(opened, outside)


# -- tables -------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["jsonl", "csv"])
def test_table_media_values_leading_out_are_refused(tmp_path, outside, opened, suffix):
    ds = tmp_path / "ds"
    hostile = _hostile(ds, outside)
    (ds / "ok.jpg").write_bytes(GOOD)
    rows = [{"image": v, "caption": f"c{i}"} for i, v in enumerate(["ok.jpg", *hostile])]
    table = ds / f"t.{suffix}"
    if suffix == "jsonl":
        table.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        table.write_text(
            "image,caption\n" + "".join(f"{r['image']},{r['caption']}\n" for r in rows)
        )
    got = open_dataset(table)
    assert got.read(0)["image"] == GOOD
    for i, path in enumerate(hostile, 1):
        with pytest.raises(BadSampleError) as e:
            got.read(i)
        assert e.value.path == str(table) and e.value.key == f"t/{i}"
        assert f"path {path!r} leaves the media folder" in e.value.reason
    report = prepare_dataset(table)
    assert report.num_samples == 1
    assert [p.key for p in report.problems] == [f"t/{i}" for i in range(1, len(rows))]
    assert all(f"{p!r}" in q.reason for p, q in zip(hostile, report.problems))
    _never_opened(opened, outside)


def test_table_value_leading_out_is_refused_before_the_aux_dataset(tmp_path, outside, opened):
    make_image_caption_dataset(tmp_path / "aux", shards=1, per_shard=1)
    prepare_dataset(tmp_path / "aux")
    (tmp_path / "t.jsonl").write_text(json.dumps({"image": "../outside/secret.jpg"}) + "\n")
    got = open_dataset(tmp_path / "t.jsonl", aux=tmp_path / "aux")
    with pytest.raises(BadSampleError, match="leaves the media folder"):
        got.read(0)
    _never_opened(opened, outside)


@pytest.mark.parametrize("recorded", ["/", "../../..", "outside", "linkdir"])
def test_prepared_table_media_folder_outside_is_refused_at_open(
    tmp_path, outside, opened, recorded
):
    # a prepared table folder from elsewhere whose info.yaml names any media folder
    ds = tmp_path / "a" / "b" / "ds"  # ../../.. is tmp_path
    ds.mkdir(parents=True)
    os.symlink(outside, ds / "linkdir", target_is_directory=True)
    recorded = str(outside) if recorded == "outside" else recorded
    base = os.path.realpath(ds / recorded)  # where the recorded folder leads
    value = os.path.relpath(outside / "secret.jpg", base)
    (ds / "t.jsonl").write_text(json.dumps({"image": value, "caption": "c"}) + "\n")
    prepare_dataset(ds / "t.jsonl", root=base)
    info = ds / ".fpipe" / "info.yaml"
    _edit_yaml(info, lambda i: i["table"].update(root=recorded))
    opened.clear()
    with pytest.raises(ConfigError) as e:
        open_dataset(ds)
    assert f"{info}: the media folder {recorded!r}" in str(e.value)
    assert "media_root" in str(e.value) and "--media-root" in str(e.value)
    with pytest.raises(ConfigError, match=r"not inside the allowed folders"):
        open_dataset(ds, media_root=ds)  # a folder of the user's that does not hold it
    _never_opened(opened, outside)
    got = open_dataset(ds, media_root=[ds, base])  # the user names it: read from there
    assert got.read(0)["image"] == SECRET
    assert pickle.loads(pickle.dumps(got)).read(0)["image"] == SECRET  # workers reopen alike


def test_prepared_table_aux_dataset_outside_is_refused_at_open(tmp_path, opened):
    aux = tmp_path / "aux"
    expected = make_image_caption_dataset(aux, shards=1, per_shard=1)
    prepare_dataset(aux)
    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / "t.jsonl").write_text(json.dumps({"image": f"{expected[0]['key']}.jpg"}) + "\n")
    prepare_dataset(ds / "t.jsonl", aux=aux)  # recorded as ../aux
    opened.clear()
    info = ds / ".fpipe" / "info.yaml"
    with pytest.raises(ConfigError, match=rf"{info}: the auxiliary dataset '\.\./aux'"):
        open_dataset(ds)
    _never_opened(opened, aux)
    got = open_dataset(ds, media_root=tmp_path)  # a folder holding it
    assert got.read(0)["image"] == expected[0]["members"]["jpg"]


# -- shards: Energon's .info.yaml, links in the folder, links inside shards, split files -------


def _edit_yaml(path: Path, fn) -> None:
    data = yaml.safe_load(path.read_text())
    fn(data)
    path.write_text(yaml.safe_dump(data))


def test_energon_shard_names_leading_out_are_refused(tmp_path, opened):
    outside = tmp_path / "outside"
    make_image_caption_dataset(outside, shards=1, per_shard=2)
    ds = tmp_path / "ds"
    make_energon_dataset(ds, shards=1, per_shard=2)
    hostile = ["../outside/shard-0000.tar", str(outside / "shard-0000.tar")]
    info = ds / ".nv-meta" / ".info.yaml"
    _edit_yaml(info, lambda i: i["shard_counts"].update(dict.fromkeys(hostile, 2)))
    with pytest.raises(ConfigError, match=r"\.nv-meta: shard path .* leaves the dataset folder"):
        open_dataset(ds)
    report = prepare_dataset(ds)  # the shards inside are indexed, the others reported
    assert report.num_samples == 2
    assert [(p.path, p.key) for p in report.problems] == [(h, "") for h in hostile]
    assert all("leaves the dataset folder" in p.reason for p in report.problems)
    assert open_dataset(ds).shards == ("shards/part_000.tar",)
    _never_opened(opened, outside)


def test_shard_linking_out_of_the_folder_is_refused_at_prepare(tmp_path, opened):
    outside = tmp_path / "outside"
    make_image_caption_dataset(outside, shards=1, per_shard=2)
    ds = tmp_path / "ds"
    make_image_caption_dataset(ds, shards=1, per_shard=2)
    os.symlink(outside / "shard-0000.tar", ds / "shard-0001.tar")
    report = prepare_dataset(ds)
    assert report.num_samples == 2 and report.num_shards == 1
    assert [(p.path, p.key) for p in report.problems] == [("shard-0001.tar", "")]
    assert "outside the dataset folder" in report.problems[0].reason
    assert check_dataset(str(ds)).ok  # `fpipe check` walks the indexed shard only
    _never_opened(opened, outside)


def _tar_with_links(path: Path, outside: Path) -> None:
    """Sample 0000: a text member and a symbolic link to the outside file; 0001: plain;
    0002: a text member and a hard link to it (as ``tar`` writes duplicates)."""
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:

        def add(name: str, data: bytes = b"", link: str = "", kind=tarfile.REGTYPE):
            ti = tarfile.TarInfo(name)
            ti.type, ti.linkname, ti.size = kind, link, len(data)
            tf.addfile(ti, io.BytesIO(data) if data else None)

        add("0000.txt", b"a")
        add("0000.jpg", link=str(outside / "secret.jpg"), kind=tarfile.SYMTYPE)
        add("0001.txt", b"b")
        add("0001.jpg", GOOD)
        add("0002.txt", b"c")
        add("0002.jpg", link="0001.jpg", kind=tarfile.LNKTYPE)


def test_links_inside_tar_shards_are_refused(tmp_path, outside, opened):
    ds = tmp_path / "ds"
    ds.mkdir()
    _tar_with_links(ds / "s.tar", outside)
    report = prepare_dataset(ds)
    assert report.num_samples == 1
    assert [(p.path, p.key) for p in report.problems] == [("s.tar", "s/0000"), ("s.tar", "s/0002")]
    assert f"'0000.jpg' is a link to {str(outside / 'secret.jpg')!r}" in report.problems[0].reason
    assert open_dataset(ds).read(0) == {"txt": b"b", "jpg": GOOD}
    # the same shard read through Energon's .tar.idx, without fpipe prepare
    shutil.rmtree(ds / ".fpipe")
    write_tar_idx(ds / "s.tar")
    (ds / ".nv-meta").mkdir()
    (ds / ".nv-meta" / ".info.yaml").write_text(yaml.safe_dump({"shard_counts": {"s.tar": 3}}))
    got = open_dataset(ds)
    for i in (0, 2):
        with pytest.raises(BadSampleError, match="is a link to") as e:
            got.read(i)
        assert e.value.path.endswith("s.tar") and e.value.key == f"s/#{i}"
    assert got.read(1) == {"txt": b"b", "jpg": GOOD}
    _never_opened(opened, outside)


def test_split_files_naming_shards_or_files_outside_are_refused(tmp_path, outside, opened):
    ds = tmp_path / "ds"
    make_image_caption_dataset(ds, shards=1, per_shard=2)
    prepare_dataset(ds)
    split = ds / ".fpipe" / "split.yaml"
    split.write_text(yaml.safe_dump({"split_parts": {"train": ["../outside/secret.jpg"]}}))
    with pytest.raises(ConfigError, match=r"split\.yaml: split 'train' names shard '\.\./out"):
        open_dataset(ds).split_indices("train")
    split.unlink()
    # a split_config file (named by the user or by a dataset config) linking out
    (outside / "alt.yaml").write_text(yaml.safe_dump({"split_parts": {"train": []}}))
    os.symlink(outside / "alt.yaml", ds / ".fpipe" / "alt.yaml")
    with pytest.raises(ConfigError, match="split_config '.fpipe/alt.yaml' leaves the dataset"):
        open_dataset(ds).split_indices("train", "alt.yaml")
    _never_opened(opened, outside)


def test_shard_names_under_a_file_url_stay_under_it(tmp_path):
    ds = tmp_path / "ds"
    make_image_caption_dataset(ds, shards=1, per_shard=2)
    prepare_dataset(ds)
    index = tmp_path / "index"
    shutil.copytree(ds / ".fpipe", index)
    _edit_yaml(index / "info.yaml", lambda i: i["shards"][0].update(name="../outside/s.tar"))
    with pytest.raises(ConfigError, match=r"info\.yaml: shard path '\.\./outside/s\.tar' leaves"):
        open_dataset(f"file://{ds}", index_dir=index, shard_check="off")


# -- what is allowed ----------------------------------------------------------------------------


def test_paths_inside_the_folder_and_user_written_paths_are_accepted(tmp_path):
    from fpipe.storage import load_metadataset, resolve_mix
    from fpipe.storage.paths import contained

    ds = tmp_path / "ds"
    (ds / "img").mkdir(parents=True)
    os.symlink(ds / "img", ds / "alias", target_is_directory=True)  # a link staying inside
    assert contained(ds, "alias/0.jpg") == str(ds / "alias/0.jpg")
    assert contained(ds, str(ds / "img/0.jpg")) == str(ds / "img/0.jpg")  # absolute, inside
    assert contained(ds, "./img/./0.jpg") == os.path.join(ds, "./img/./0.jpg")
    # a metadataset is written by the user: its paths may lead to sibling datasets
    make_image_caption_dataset(tmp_path / "other", shards=1, per_shard=2)
    prepare_dataset(tmp_path / "other")
    (tmp_path / "mixes").mkdir()
    (tmp_path / "mixes" / "mix.yaml").write_text("splits: {train: {path: ../other}}\n")
    mix = resolve_mix(load_metadataset(tmp_path / "mixes" / "mix.yaml"), "train")
    assert [Path(leaf.path) for leaf in mix.leaves] == [tmp_path / "other"]
