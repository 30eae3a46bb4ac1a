"""What the loader's per-sample path gives is pinned: the batches (every key, restore key,
``__sources__`` record and array byte) of two small token-id datasets equal digests taken
before that path was made cheaper, and thread workers give the same batches.

The first dataset reads one ``.npy`` member per sample (a lone member's read); the second maps
its text field to ``txt`` or else ``json[caption]`` (two members read in one range, some
samples without ``txt``)."""

import hashlib
import io
import json
import tarfile

import numpy as np
import pytest

import fpipe
from fpipe.samples import SourceInfo
from fpipe.storage import prepare_dataset

# Taken with the per-sample path as it was before it was made cheaper (commit 31d5858).
NPY_DIGEST = "ce221b89eecec262d42767e89a36279669cc8c473e674e00acf877ff225df1ec"
ALT_DIGEST = "487aeb3d8037258aa5be03e51ed4daa54ad7d0481fb88782563402f311b2eb41"


def _write(path, samples):
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:
        for key, members in samples:
            for ext, data in members.items():
                ti = tarfile.TarInfo(f"{key}.{ext}")
                ti.size, ti.mtime, ti.mode = len(data), 1_700_000_000, 0o644
                tf.addfile(ti, io.BytesIO(data))


def _npy(arr):
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def _token_set(root):
    rng = np.random.default_rng(5)
    root.mkdir()
    for s in range(3):
        samples = []
        for j in range(23):
            ids = rng.integers(0, 1000, size=int(rng.integers(3, 13)), dtype=np.int32)
            samples.append((f"t{s}{j:03d}", {"npy": _npy(ids)}))
        _write(root / f"shard-{s}.tar", samples)
    prepare_dataset(root, fields={"text": "npy"}, sample_type="TextSample", split="1,0,0")
    return root


def _alternatives_set(root):
    root.mkdir()
    for s in range(2):
        samples = []
        for j in range(20):
            members = {"json": json.dumps({"caption": f"json {s}-{j}"}).encode()}
            if j % 3:
                members["txt"] = f"text {s}-{j}".encode()
            samples.append((f"parts/a{s}/{j:04d}", members))
        (root / "parts").mkdir(exist_ok=True)
        _write(root / "parts" / f"a{s}.tar", samples)
    prepare_dataset(
        root,
        fields={"text": ["txt", "json[caption]"]},
        sample_type="TextSample",
        split="1,0,0",
    )
    return root


def _digest(batches, root) -> str:
    """Every field of every batch (a list per field, ``__sources__`` a tuple per sample), the
    dataset's root left out of the sources' paths."""
    h = hashlib.sha256()
    for b in batches:
        records = [s for per_sample in b.__sources__ for s in per_sample]
        assert all(type(s) is SourceInfo for s in records)
        sources = [
            (s.dataset_path.replace(str(root), "<root>"), s.index, s.shard_name, s.file_names)
            for s in records
        ]
        texts = [
            (t.dtype.str, t.shape, t.tobytes()) if isinstance(t, np.ndarray) else t for t in b.text
        ]
        h.update(
            repr(
                (list(b.__key__), list(b.__restore_key__), b.__subflavors__, sources, texts)
            ).encode()
        )
    return h.hexdigest()


def _batches(root, n, **loader_kw):
    ds = fpipe.get_train_dataset(
        str(root), batch_size=8, shuffle_buffer_size=16, max_samples_per_sequence=5, seed=11
    )
    it = iter(fpipe.get_loader(ds, **loader_kw))
    try:
        return [next(it) for _ in range(n)]
    finally:
        del it


@pytest.fixture(scope="module")
def token_set(tmp_path_factory):
    return _token_set(tmp_path_factory.mktemp("golden") / "tokens")


@pytest.fixture(scope="module")
def alternatives_set(tmp_path_factory):
    return _alternatives_set(tmp_path_factory.mktemp("golden") / "alt")


def test_token_batches_equal_the_pinned_digest(token_set):
    assert _digest(_batches(token_set, 12, num_workers=0), token_set) == NPY_DIGEST


def test_two_member_batches_equal_the_pinned_digest(alternatives_set):
    assert _digest(_batches(alternatives_set, 8, num_workers=0), alternatives_set) == ALT_DIGEST


def test_thread_workers_give_the_same_batches(token_set, alternatives_set):
    for root, n in ((token_set, 12), (alternatives_set, 8)):
        threads = _batches(root, n, num_workers=2, worker_mode="thread")
        assert _digest(threads, root) == _digest(_batches(root, n, num_workers=0), root)


def test_a_returned_list_is_one_sample_and_a_generators_values_are_several(token_set):
    class AsList(fpipe.DefaultTaskEncoder):
        def encode_sample(self, sample):
            return [sample.__key__, len(sample.text)]

        def batch(self, samples):
            return samples

    class Twice(AsList):
        def encode_sample(self, sample):
            yield [sample.__key__, 0]
            yield [sample.__key__, 1]

    def first_batch(enc):
        ds = fpipe.get_train_dataset(
            str(token_set), batch_size=4, shuffle_buffer_size=None, seed=1, task_encoder=enc
        )
        it = iter(fpipe.get_loader(ds, num_workers=0))
        return next(it)

    one = first_batch(AsList())
    assert len(one) == 4 and all(isinstance(s, list) and len(s) == 2 for s in one)
    two = first_batch(Twice())
    assert [s[1] for s in two] == [0, 1] * 4 and [s[0] for s in two[::2]] == [s[0] for s in one]
