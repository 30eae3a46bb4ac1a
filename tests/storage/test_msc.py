"""Energon's remote paths against a local S3 server (moto): ``msc://PROFILE/path`` resolved
through multi-storage-client's configuration, ``dss://NAME@VERSION`` through
``$NVDATASET_CACHE_DIR``, and an Energon-layout dataset (``.nv-meta/``, ``.tar.idx``) in a
bucket."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from tests.optional import skip_unless_installed  # noqa: E402

skip_unless_installed("obstore", "moto", "multistorageclient")

import fpipe  # noqa: E402
from fpipe.core.errors import BadSampleError, ConfigError  # noqa: E402
from fpipe.energon import Cooker, DefaultTaskEncoder, Sample, basic_sample_keys, cooker  # noqa: E402
from fpipe.energon.epath import EPath  # noqa: E402
from fpipe.storage import load_metadataset, open_dataset, resolve_mix  # noqa: E402
from tests.energon.energon_folder import (  # noqa: E402
    CRUDE_CONFIG,
    TEXT_CONFIG,
    make_plain_energon_folder,
)
from tests.storage.s3_server import serving_s3  # noqa: E402

BUCKET = "fpipe-msc"
SHARDS = ("parts/data-0.tar", "parts/data-1.tar")


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with serving_s3(tmp_path_factory.mktemp("cache")) as server:
        yield server


@pytest.fixture(scope="module")
def uploaded(s3, tmp_path_factory):
    """An Energon folder on disk (``local``) and the same files in the bucket under
    ``energon/``; ``dss/text/v1/`` holds them again (a dataset-service cache in the bucket)."""
    local = make_plain_energon_folder(tmp_path_factory.mktemp("data") / "text", TEXT_CONFIG)
    s3.upload(local, BUCKET, "energon")
    s3.upload(local, BUCKET, "dss/text/v1")
    return local


@pytest.fixture
def msc(s3, tmp_path, monkeypatch):
    """An MSC configuration in ``tmp_path`` with profile ``emu`` (the server, bucket
    ``fpipe-msc``) named by ``MSC_CONFIG``. The AWS variables pointing at the server are
    removed: the endpoint and the credentials can only come from the profile."""
    config = tmp_path / "msc_config.yaml"
    config.write_text(
        "profiles:\n"
        "  emu:\n"
        "    storage_provider:\n"
        "      type: s3\n"
        "      options:\n"
        f"        base_path: {BUCKET}\n"
        f"        endpoint_url: {s3.endpoint}\n"
        "        region_name: us-east-1\n"
        "    credentials_provider:\n"
        "      type: S3Credentials\n"
        "      options:\n"
        "        access_key: testing\n"
        "        secret_key: testing\n"
        "  gcs_data:\n"
        "    storage_provider:\n"
        "      type: gcs\n"
        "      options:\n"
        "        base_path: some-bucket\n"
        "        project_id: p\n"
    )
    monkeypatch.setenv("MSC_CONFIG", str(config))
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    return config


def _texts(ds):
    return [ds.read(i)["txt"] for i in range(len(ds))]


def test_msc_energon_dataset_reads_as_the_local_folder(uploaded, msc):
    remote = open_dataset("msc://emu/energon")
    local = open_dataset(uploaded)
    assert len(remote) == len(local) == 6
    remote.prefetch(list(range(6)))
    assert _texts(remote) == _texts(local)
    # the samples of a recipe are fetched together: close ones share a GET (one per shard)
    assert remote.reader._files.requests == 2
    assert [remote.key(i) for i in range(6)] == [local.key(i) for i in range(6)]


def test_rclone_profile_names_the_bucket_in_the_path(s3, uploaded, tmp_path, monkeypatch):
    # Energon's S3 tests configure rclone, which MSC reads too: no base_path, bucket first
    (tmp_path / "rclone").mkdir()
    (tmp_path / "rclone" / "rclone.conf").write_text(
        f"[rc]\ntype = s3\naccess_key_id = testing\nsecret_access_key = testing\n"
        f"region = us-east-1\nendpoint = {s3.endpoint}\n"
    )
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("MSC_CONFIG", str(tmp_path / "none.yaml"))
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    assert _texts(open_dataset(f"msc://rc/{BUCKET}/energon")) == _texts(open_dataset(uploaded))


def test_metadataset_blends_a_local_and_an_msc_dataset_and_resumes_exactly(uploaded, msc, tmp_path):
    md = tmp_path / "mix.yaml"
    md.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        f"    blend:\n      - weight: 1\n        path: {uploaded}\n        name: disk\n"
        "      - weight: 1\n        path: msc://emu/energon\n        name: bucket\n"
    )

    def loader():
        ds = fpipe.get_train_dataset(str(md), batch_size=2, seed=3)
        return fpipe.get_loader(ds, num_workers=0)

    def take(it, n):
        return [tuple(next(it).text) for _ in range(n)]

    first = loader()
    it = iter(first)
    head = take(it, 3)
    state = first.state_dict()
    rest = take(it, 4)
    taken = first.stats().datasets
    assert set(taken) == {"disk", "bucket"} and all(v["taken"] > 0 for v in taken.values())
    assert len(head) == 3
    resumed = loader()
    resumed.load_state_dict(state)
    assert take(iter(resumed), 4) == rest


def test_dss_path_resolves_under_the_cache_dir(uploaded, msc, tmp_path, monkeypatch):
    # a local dataset-service cache: NAME/VERSION below NVDATASET_CACHE_DIR
    cache = tmp_path / "dss-cache"
    (cache / "text").mkdir(parents=True)
    (cache / "text" / "v1").symlink_to(uploaded, target_is_directory=True)
    monkeypatch.setenv("NVDATASET_CACHE_DIR", str(cache))
    md = tmp_path / "dss.yaml"
    md.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        "    path: dss://text@v1\n"
    )
    ds = fpipe.get_train_dataset(str(md), batch_size=3, seed=0)
    batch = next(iter(fpipe.get_loader(ds, num_workers=0)))
    assert len(batch.text) == 3
    assert EPath("dss://text@v1/parts") == str(cache / "text" / "v1" / "parts")
    # the cache in the bucket, named by an msc:// URL
    monkeypatch.setenv("NVDATASET_CACHE_DIR", "msc://emu/dss")
    assert _texts(open_dataset("dss://text@v1")) == _texts(open_dataset(uploaded))


def test_dss_path_needs_a_version_and_the_cache_dir(monkeypatch):
    monkeypatch.setenv("NVDATASET_CACHE_DIR", "/nowhere")
    with pytest.raises(ConfigError, match=r"dss://NAME@VERSION"):
        open_dataset("dss://text")
    monkeypatch.delenv("NVDATASET_CACHE_DIR")
    with pytest.raises(ConfigError, match="NVDATASET_CACHE_DIR"):
        open_dataset("dss://text@v1")


def test_unknown_profile_and_other_providers_are_refused(msc, tmp_path):
    with pytest.raises(ConfigError) as e:
        open_dataset("msc://nope/energon")
    assert "msc://" in str(e.value) and "'nope'" in str(e.value)
    assert str(msc) in str(e.value) and "emu" in str(e.value)  # where it looked, what is there
    with pytest.raises(ConfigError, match=r"'gcs'.*gs://"):
        open_dataset("msc://gcs_data/x")
    # in a metadataset: refused when it is read, naming the file and the entry
    md = tmp_path / "bad.yaml"
    md.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        "    path: msc://nope/energon\n"
    )
    with pytest.raises(ConfigError, match=r"bad\.yaml.*'nope' is not defined"):
        fpipe.get_train_dataset(str(md), batch_size=1)
    md.write_text(md.read_text().replace("msc://nope/energon", "ftp://host/data"))
    with pytest.raises(ConfigError, match=r"does not read ftp:// paths"):
        fpipe.get_train_dataset(str(md), batch_size=1)
    with pytest.raises(ConfigError, match=r"does not read ftp:// paths"):
        open_dataset("ftp://host/data")
    # a metadataset file in a bucket is read from there: a missing one is named
    with pytest.raises(ConfigError, match=r"msc://emu/energon/mix\.yaml does not exist"):
        fpipe.get_train_dataset("msc://emu/energon/mix.yaml", batch_size=1)


def test_shard_names_in_a_remote_nv_meta_stay_inside_the_dataset(s3, uploaded, msc, tmp_path):
    bad = make_plain_energon_folder(tmp_path / "bad", TEXT_CONFIG)
    info = bad / ".nv-meta" / ".info.json"
    counts = json.loads(info.read_text())
    counts["shard_counts"] = {"../energon/parts/data-0.tar": 3, "parts/data-1.tar": 3}
    info.write_text(json.dumps(counts))
    s3.upload(bad, BUCKET, "escape")
    with pytest.raises(ConfigError, match=r"'\.\./energon/parts/data-0\.tar' leaves"):
        open_dataset("msc://emu/escape")
    # split.yaml names only shards of the index: one leading out is not in it
    info.write_text(json.dumps({**counts, "shard_counts": dict.fromkeys(SHARDS, 3)}))
    split = bad / ".nv-meta" / "split.yaml"
    split.write_text(split.read_text().replace("- parts/data-0.tar", "- ../x/parts/data-0.tar"))
    s3.upload(bad, BUCKET, "escape")
    with pytest.raises(ConfigError, match=r"split\.yaml.*'\.\./x/parts/data-0\.tar', not in"):
        fpipe.get_train_dataset("msc://emu/escape", batch_size=1)


_HEAD = "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"


def _upload_files(s3, tmp_path, files: dict[str, str]) -> None:
    """``files`` (name -> text) written to a folder and uploaded under ``mds/``."""
    folder = tmp_path / "mds-upload"
    folder.mkdir(exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    s3.upload(folder, BUCKET, "mds")


def test_a_metadataset_file_in_a_bucket_names_datasets_beside_it(s3, uploaded, msc, tmp_path):
    # as Energon's test_s3: a local file names a metadataset file in the bucket, which names a
    # nested one next to it, whose relative path leads to a dataset in the same bucket
    _upload_files(s3, tmp_path, {
        "outer.yaml": _HEAD + "    blend:\n      - weight: 1\n        path: ./inner.yaml\n"
        f"      - weight: 1\n        path: {uploaded}\n        name: disk\n",
        "inner.yaml": _HEAD + "    path: ../energon\n",
    })  # fmt: skip
    top = tmp_path / "top.yaml"
    top.write_text(_HEAD + "    path: msc://emu/mds/outer.yaml\n")
    leaves = resolve_mix(load_metadataset(str(top)), "train").leaves
    assert sorted(lf.path for lf in leaves) == sorted(["msc://emu/energon", str(uploaded)])
    loader = fpipe.get_loader(fpipe.get_train_dataset(str(top), batch_size=2, seed=1))
    it = iter(loader)
    texts = {t for _ in range(6) for t in next(it).text}
    assert texts == {t.decode() for t in _texts(open_dataset(uploaded))}
    taken = loader.stats().datasets  # both datasets were read
    assert len(taken) == 2 and all(v["taken"] > 0 for v in taken.values()), taken


def test_relative_paths_in_a_bucket_cannot_climb_above_it(s3, uploaded, msc, tmp_path):
    _upload_files(s3, tmp_path, {"up.yaml": _HEAD + "    path: ../../../elsewhere\n"})
    with pytest.raises(ConfigError, match=r"up\.yaml.*'\.\./\.\./\.\./elsewhere' leads above"):
        load_metadataset("msc://emu/mds/up.yaml")


@dataclasses.dataclass
class _Cooked(Sample):
    n: int
    note: Any
    other: Any


@cooker
def _cook_remote(sample: dict, texts, files) -> _Cooked:
    n = sample["json"]["n"]
    note = files.get("note.txt", sample)  # a folder in the bucket, by name
    return _Cooked(**basic_sample_keys(sample), n=n, note=note, other=texts.get(f"{n:06d}.txt"))


class _RemoteAux(DefaultTaskEncoder):
    cookers = [Cooker(_cook_remote)]


def test_aux_stores_in_a_bucket_serve_a_cooker(s3, uploaded, msc, tmp_path):
    from fpipe.energon import get_loader, get_val_dataset

    make_plain_energon_folder(tmp_path / "crude", CRUDE_CONFIG)
    _upload_files(s3, tmp_path, {"note.txt": "hello"})
    md = tmp_path / "aux.yaml"
    md.write_text(
        _HEAD + "    path: crude\n    aux:\n      texts: msc://emu/energon\n"
        "      files: filesystem+msc://emu/mds\n"
    )
    ds = get_val_dataset(str(md), split="train", batch_size=1, task_encoder=_RemoteAux())
    with get_loader(ds, num_workers=0) as loader:
        got = sorted((b.n[0], b.note[0], b.other[0]) for b in loader)
    assert got == [(n, "hello", f"{n + 10}") for n in range(6)]


def test_a_jsonl_table_in_a_bucket_reads_as_the_local_file(s3, msc, tmp_path):
    # Energon's prepared table: x.jsonl with its offsets in x.jsonl.idx (not a Megatron index)
    rows = "".join(f'{{"idx": {i}, "txt": "t{i}"}}\n' for i in range(4))
    _upload_files(s3, tmp_path, {"t.jsonl": rows, "t.jsonl.idx": "\0" * 40})
    remote, local = (
        open_dataset("msc://emu/mds/t.jsonl"),
        open_dataset(tmp_path / "mds-upload/t.jsonl"),
    )
    assert len(remote) == 4 and _texts(remote) == _texts(local) == [b"t0", b"t1", b"t2", b"t3"]
    assert [remote.key(i) for i in range(4)] == [local.key(i) for i in range(4)]
    # media files its rows name: beside it in the bucket, confined to its folder
    rows = '{"image": "a.png"}\n{"image": "../a.png"}\n'
    _upload_files(s3, tmp_path, {"m.jsonl": rows, "a.png": "PNGDATA"})
    media = open_dataset("msc://emu/mds/m.jsonl")
    assert media.read(0)["image"] == b"PNGDATA"
    with pytest.raises(BadSampleError, match=r"'\.\./a\.png' leaves"):
        media.read(1)


def test_energon_entry_points_take_an_epath_of_a_url_or_a_local_file(s3, uploaded, msc, tmp_path):
    # Energon users pass EPath objects; one naming a URL reads as its URL string does
    from fpipe.energon import (
        get_dataset_from_config,
        get_loader,
        get_train_dataset,
        get_val_datasets,
        load_dataset,
        traverse_metadataset,
    )

    _upload_files(s3, tmp_path, {"epath.yaml": _HEAD + "    path: ../energon\n"})
    url = "msc://emu/mds/epath.yaml"
    local = tmp_path / "local.yaml"
    local.write_text(_HEAD + f"    path: {uploaded}\n")

    def first_texts(path, build=get_train_dataset, **kwargs):
        with get_loader(build(path, batch_size=2, seed=1, **kwargs), num_workers=0) as loader:
            it = iter(loader)
            return [t for _ in range(3) for t in next(it).text]

    want = first_texts(url)
    assert sorted(want) == sorted(t.decode() for t in _texts(open_dataset(uploaded)))
    assert first_texts(EPath(url)) == want
    assert first_texts(EPath(local)) == want
    # fpipe's own function reads the URL string the same (with Energon's slices)
    assert first_texts(url, fpipe.get_train_dataset, sequence_slices="shards") == want
    assert [s.path for _, s in get_val_datasets(EPath(url), split="train", batch_size=1)] == [
        "msc://emu/energon"
    ]
    assert [r.path for r in traverse_metadataset(EPath(url), split_part="train")] == [
        EPath("msc://emu/energon")
    ]
    assert type(load_dataset(EPath(url))).__name__ == "MetadatasetLoader"
    factory = get_dataset_from_config(
        EPath("msc://emu/energon"), split_part="train", worker_config=None
    )
    assert len(factory) == 6 and factory.paths == [EPath("msc://emu/energon")]
