"""Energon's remote paths against a local S3 server (moto): ``msc://PROFILE/path`` resolved
through multi-storage-client's configuration, ``dss://NAME@VERSION`` through
``$NVDATASET_CACHE_DIR``, and an Energon-layout dataset (``.nv-meta/``, ``.tar.idx``) in a
bucket."""

from __future__ import annotations

import json

import pytest

from tests.optional import skip_unless_installed  # noqa: E402

skip_unless_installed("obstore", "moto", "multistorageclient")

import fpipe  # noqa: E402
from fpipe.core.errors import ConfigError  # noqa: E402
from fpipe.energon.epath import EPath  # noqa: E402
from fpipe.storage import open_dataset  # noqa: E402
from tests.energon.energon_folder import TEXT_CONFIG, make_plain_energon_folder  # noqa: E402
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
    # a metadataset file in a bucket is refused by name, not looked for on disk
    with pytest.raises(ConfigError, match=r"metadataset file on object storage"):
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
