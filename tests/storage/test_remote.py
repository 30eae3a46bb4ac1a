"""Datasets on object storage, against a real S3-compatible server on 127.0.0.1 (moto)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.optional import skip_unless_installed  # noqa: E402

skip_unless_installed("obstore", "moto")

import fpipe  # noqa: E402
from fpipe.core.errors import BadSampleError, ConfigError  # noqa: E402
from fpipe.storage import objects, open_dataset, paths, prepare_dataset  # noqa: E402
from fpipe.storage.read import remote  # noqa: E402
from tests.loader.helpers import build, digest, take  # noqa: E402
from tests.storage.helpers import make_image_caption_dataset, write_tar  # noqa: E402
from tests.storage.s3_server import FlakyProxy, restore_env, serving_s3, set_env  # noqa: E402

FIELDS = {"image": "jpg", "caption": "txt"}


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with serving_s3(tmp_path_factory.mktemp("cache")) as server:
        yield server


@pytest.fixture(scope="module")
def pair(s3, tmp_path_factory):
    """The same shards prepared locally and in the bucket (index in the bucket)."""
    local = tmp_path_factory.mktemp("data") / "imgs"
    make_image_caption_dataset(local, shards=3, per_shard=8, with_json=False)
    url = s3.upload(local, "fpipe-test", "imgs")
    opts = dict(fields=FIELDS, sample_type="CaptioningSample", split="1,0,0")
    prepare_dataset(local, **opts)
    report = prepare_dataset(url, **opts)
    assert report.num_samples == 24 and report.index_dir == url + "/.fpipe"
    return str(local), url


def test_is_url():
    assert paths.is_url("s3://b/x") and paths.is_url("gs://b") and paths.is_url("az://c/p")
    assert not paths.is_url("/data/x") and not paths.is_url("x.tar")
    assert paths.split_url("s3://b/data/x/") == ("s3://b", "data/x")


def test_remote_dataset_reads_the_same_bytes(pair):
    local, url = pair
    a, b = open_dataset(local), open_dataset(url)
    assert len(a) == len(b) == 24
    assert [a.key(i) for i in range(24)] == [b.key(i) for i in range(24)]
    b.prefetch(range(24))
    assert all(a.read(i) == b.read(i) for i in range(24))
    files = b.reader._files
    # one ranged GET per sample, nothing more, except that close small samples share one
    # (these are: one GET per shard)
    assert files.requests == 3
    one = open_dataset(url)
    assert all(one.read(i) == a.read(i) for i in range(24))  # no prefetch: a GET per sample
    assert one.reader._files.requests == 24


def test_batches_and_snapshots_are_identical_to_local(pair):
    local, url = pair
    la, lb = build(local, num_workers=0), build(url, num_workers=0)
    assert take(la, 5) == take(lb, 5)
    assert la.state_dict() == lb.state_dict()  # snapshots do not depend on where the data is


def test_resume_moves_between_local_and_bucket(pair):
    local, url = pair
    ref = build(local)
    expected = take(ref, 7)
    first = build(url)
    got = take(first, 3)
    state = first.state_dict()
    moved = build(local)  # the data moved back to a local disk: resume stays exact
    moved.load_state_dict(state)
    assert got + take(moved, 4) == expected


def test_workers_read_the_bucket(pair):
    local, url = pair
    # obstore does not survive fork: the loader starts remote workers with forkserver
    assert take(build(url, num_workers=2), 4) == take(build(local), 4)


def test_local_index_dir(s3, pair, tmp_path):
    local, _ = pair
    url = s3.upload(local, "fpipe-test", "imgs-local-index")
    index = tmp_path / "index"
    report = prepare_dataset(url, fields=FIELDS, index_dir=index)
    assert report.index_dir == str(index) and (index / "info.yaml").exists()
    ds = open_dataset(url, index_dir=index)
    assert ds.read(5) == open_dataset(local).read(5)
    with pytest.raises(ConfigError, match="no .fpipe/info.yaml in the bucket"):
        open_dataset(url)  # the bucket has no index of its own


def test_index_copy_is_refreshed_when_prepared_anew(s3, tmp_path):
    src = tmp_path / "d"
    make_image_caption_dataset(src, shards=1, per_shard=3, with_json=False)
    url = s3.upload(src, "fpipe-test", "refresh")
    prepare_dataset(url, fields=FIELDS)
    assert len(open_dataset(url)) == 3
    write_tar(src / "shard-0001.tar", [("k9", {"jpg": b"x", "txt": b"y"})])
    s3.upload(src, "fpipe-test", "refresh")
    prepare_dataset(url, fields={"caption": "txt"})
    assert len(open_dataset(url)) == 4


def test_deleted_object_follows_the_error_policy(s3, pair, tmp_path):
    local, _ = pair
    url = s3.upload(local, "fpipe-test", "deleted")
    prepare_dataset(url, fields=FIELDS, sample_type="CaptioningSample")
    s3.client().delete_object(Bucket="fpipe-test", Key="deleted/shard-0001.tar")
    with pytest.raises(ConfigError, match=r"shard-0001\.tar: shard changed.*is missing"):
        open_dataset(url)  # the listing on open misses it
    ds = open_dataset(url, shard_check="off")  # deleted after opening: per read
    with pytest.raises(BadSampleError, match=r"shard-0001\.tar.*no such object") as e:
        ds.read(8)
    assert e.value.key == ds.key(8)
    # skip policy: a batch loses the sample and the loader counts it
    skipping = fpipe.get_train_dataset(
        url,
        batch_size=24,
        seed=0,
        error_policy="skip",
        num_epochs=1,
        open_kwargs={"shard_check": "off"},
    )
    loader = fpipe.get_loader(skipping, num_workers=0)
    batch = next(iter(loader))
    assert len(batch.caption) == 16 and loader.stats().skipped == 8


def test_transient_failures_are_retried(s3, pair):
    local, url = pair
    proxy = FlakyProxy(s3.endpoint, fail_every=3)
    old = set_env({"AWS_ENDPOINT_URL": proxy.endpoint})
    try:
        # One GET in three fails, so a request fails k times in a row with odds ~3^-k: allow
        # enough retries (and time, under load) that a pass depends on retrying, not on luck.
        options = remote.StorageOptions(
            max_retries=12, backoff_s=0.01, max_backoff_s=0.05, retry_timeout_s=300
        )
        ds = open_dataset(url, storage=options)
        got = [ds.read(i) for i in range(24)]  # one GET each (no prefetch to group them)
    finally:
        restore_env(old)
        proxy.stop()
    assert proxy.failed >= 5  # the proxy really failed requests, and every one was retried
    ref = open_dataset(local)
    assert got == [ref.read(i) for i in range(24)]


def test_retries_are_bounded(s3, pair):
    _, url = pair
    proxy = FlakyProxy(s3.endpoint, fail_every=1)  # every GET fails
    old = set_env({"AWS_ENDPOINT_URL": proxy.endpoint})
    try:
        options = remote.StorageOptions(max_retries=2, backoff_s=0.01, max_backoff_s=0.02)
        files = remote.RemoteFiles(url, options)
        with pytest.raises(OSError):
            files.pread(url + "/shard-0000.tar", 0, 10)
    finally:
        restore_env(old)
        proxy.stop()
    assert 3 <= proxy.failed <= 4  # the first try, then max_retries retries


def test_gzip_shards_are_refused(s3, tmp_path):
    src = tmp_path / "gz"
    write_tar(src / "a.tar.gz", [("k", {"txt": b"x"})], compress=True)
    url = s3.upload(src, "fpipe-test", "gz")
    with pytest.raises(ConfigError, match="gzip-compressed.*Re-shard"):
        prepare_dataset(url, fields={"text": "txt"})


def test_forked_child_gets_an_error_not_a_hang(pair, monkeypatch):
    _, url = pair
    open_dataset(url).read(0)  # obstore's runtime is running in this process
    monkeypatch.setattr(objects, "_STORES_PID", os.getpid() + 1)  # as a forked child sees it
    with pytest.raises(ConfigError, match="forkserver"):
        remote.open_store(url)


def test_unprepared_bucket_says_what_to_run(s3, tmp_path):
    src = tmp_path / "raw"
    make_image_caption_dataset(src, shards=1, per_shard=2, with_json=False)
    url = s3.upload(src, "fpipe-test", "raw")
    with pytest.raises(ConfigError, match="fpipe prepare s3://fpipe-test/raw"):
        open_dataset(url)
    shutil.rmtree(src)


def test_digest_of_first_batch_is_stable(pair):
    # the same first batch whatever the location, also through get_train_dataset directly
    local, url = pair
    ds = [fpipe.get_train_dataset(p, batch_size=4, seed=5, num_epochs=1) for p in (local, url)]
    first = [digest(next(iter(fpipe.get_loader(d, num_workers=0)))) for d in ds]
    assert first[0] == first[1]


def test_only_the_members_a_sample_uses_are_fetched(s3, tmp_path):
    src = tmp_path / "withjson"
    make_image_caption_dataset(src, shards=1, per_shard=6, with_json=True)  # jpg, txt, json
    url = s3.upload(src, "fpipe-test", "withjson")
    prepare_dataset(url, fields=FIELDS, sample_type="CaptioningSample")
    ds = open_dataset(url)
    need = frozenset({"jpg", "txt"})
    got = []
    for i in range(6):  # one sample at a time: a batch's close samples would share a GET
        ds.prefetch([i], need)
        got.append(ds.read(i, need))
    local = open_dataset(src if (src / ".fpipe").exists() else _prepared(src))
    full = [local.read(i) for i in range(6)]
    assert [set(g) for g in got] == [need] * 6
    assert got == [{k: f[k] for k in need} for f in full]
    files = ds.reader._files
    used = sum(len(v) for g in got for v in g.values())
    # one GET per sample, and the bytes beyond the used members are the txt headers only (the
    # txt header is also the one checked against the index)
    assert files.requests == 6 and files.bytes_read - used <= 6 * 1024
    # the loader asks for the field map's members only (the json member is never fetched)
    loader = fpipe.get_loader(
        fpipe.get_train_dataset(url, batch_size=6, seed=0, num_epochs=1), num_workers=0
    )
    next(iter(loader))
    mat = loader.dataset.materializer
    assert mat.wanted(mat.sources[0]) == need


def _prepared(path):
    prepare_dataset(path, fields=FIELDS, sample_type="CaptioningSample")
    return path


def test_metadataset_blends_a_bucket_and_a_local_folder(pair, tmp_path):
    local, url = pair
    md = tmp_path / "mix.yaml"
    md.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        f"    blend:\n      - weight: 1\n        path: {local}\n        name: disk\n"
        f"      - weight: 1\n        path: {url}\n        name: bucket\n"
    )
    ds = fpipe.get_train_dataset(str(md), batch_size=8, seed=0)
    loader = fpipe.get_loader(ds, num_workers=0)
    it = iter(loader)
    batches = [next(it) for _ in range(4)]
    assert all(len(b.caption) == 8 for b in batches)
    taken = loader.stats().datasets
    assert set(taken) == {"disk", "bucket"}, taken
    assert all(v["taken"] > 0 for v in taken.values()), taken


def test_join_finds_the_parts_samples_in_a_bucket(pair, tmp_path):
    local, url = pair
    md = tmp_path / "join.yaml"
    md.write_text(
        f"splits:\n  train:\n    join:\n      - {{path: {local}}}\n      - {{path: {url}}}\n"
        "    joiner: CaptioningSample\n"
    )
    loader = fpipe.get_loader(fpipe.get_train_dataset(str(md), batch_size=8, seed=0))
    batch = next(iter(loader))
    want = {
        x["key"]: x["caption"]
        for x in make_image_caption_dataset(tmp_path / "x", shards=3, per_shard=8, with_json=False)
    }
    assert [want[k] for k in batch.__key__] == batch.caption  # the bucket's captions, by key
    part = loader.dataset.materializer.joins[("ds", 0, 0)]
    assert part.path == url and part.reader._files.requests >= 1


def test_check_preview_and_info_take_a_url(s3, pair, tmp_path):
    from fpipe.preview import save_preview
    from fpipe.storage.prepare.check import check_dataset

    _, url = pair
    report = check_dataset(url, progress=False)
    assert report.ok and report.samples == 24 and report.shards == 3
    out = save_preview(url, tmp_path / "grid.png")
    assert Path(out).stat().st_size > 0
    # a shard deleted after prepare: named when opening (as for a local folder)
    local, _ = pair
    gone = s3.upload(local, "fpipe-test", "check-gone")
    prepare_dataset(gone, fields=FIELDS, sample_type="CaptioningSample")
    s3.client().delete_object(Bucket="fpipe-test", Key="check-gone/shard-0002.tar")
    with pytest.raises(ConfigError, match=r"shard-0002\.tar: shard changed"):
        check_dataset(gone, progress=False)


def test_stale_objects_are_caught_in_the_same_get(s3, tmp_path):
    """An object rewritten after prepare with the same length (samples reordered) or two
    objects swapped: each read checks the tar header it fetched with the sample (still one
    GET per sample) and refuses other samples' bytes; a size change fails on open."""
    src = tmp_path / "d"
    for s in range(2):
        write_tar(
            src / f"s{s}.tar", [(f"{s}{i:03d}", {"txt": f"c{s}{i}".encode()}) for i in range(3)]
        )
    url = s3.upload(src, "fpipe-test", "stale")
    prepare_dataset(url, fields={"caption": "txt"})
    c = s3.client()
    put = lambda name, data: c.put_object(Bucket="fpipe-test", Key=f"stale/{name}", Body=data)  # noqa: E731
    a, b = (src / "s0.tar").read_bytes(), (src / "s1.tar").read_bytes()
    put("s0.tar", b), put("s1.tar", a)  # swapped (same sizes)
    ds = open_dataset(url)
    ds.prefetch(range(6))
    for i in range(6):
        with pytest.raises(BadSampleError, match="stale shard") as e:
            ds.read(i)
        assert e.value.key == ds.key(i) and "re-run `fpipe prepare" in str(e.value)
    # the header came with the sample, each object's samples in one GET: each sample is
    # still refused by its own key above, not its neighbours'
    assert ds.reader._files.requests == 2
    loader = fpipe.get_loader(
        fpipe.get_train_dataset(url, batch_size=6, seed=0, num_epochs=1, error_policy="skip"),
        num_workers=0,
    )
    assert sum(len(x.caption) for x in loader) == 0 and loader.stats().skipped == 6
    put("s1.tar", a + bytes(512))  # a size change is refused when opening
    with pytest.raises(ConfigError, match=r"s1\.tar: shard changed.*has 10752 bytes"):
        open_dataset(url)
    assert len(open_dataset(url, shard_check="off")) == 6
