"""Megatron indexed corpora (``prefix.idx`` / ``prefix.bin``): the writer (byte-identical to
megatron-core's ``IndexedDatasetBuilder``), the reader (every dtype, multimodal modes, corrupt
files refused with the file named), the ``"megatron"`` dataset layout, a bucket prefix, and a
token blend with an image-caption dataset that resumes exactly."""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import pytest
import torch

import fpipe
from fpipe import Topology
from fpipe.core.errors import BadSampleError, ConfigError
from fpipe.samples import TokensSample
from fpipe.storage import prepare_dataset
from fpipe.storage.prepare.megatron_writer import IndexedCorpusWriter
from fpipe.storage.read.layouts import open_dataset
from fpipe.storage.read.megatron_indexed import DTYPE_CODES, HEADER_BYTES, IndexedCorpus
from tests.storage.helpers import make_image_caption_dataset

DTYPES = tuple(d.name for d in DTYPE_CODES.values())

#: sha256 (first 16 hex digits) of ``.idx + .bin`` that megatron-core 0.16.1's
#: IndexedDatasetBuilder writes for :func:`_scenario` (recomputed against megatron-core itself
#: by test_writer_matches_megatron_core, where it is installed).
MEGATRON_DIGESTS = {
    ("uint8", False): "47b9131f62a326fd",
    ("uint8", True): "415c480450a15fe6",
    ("int8", False): "a73f33942a7e68f6",
    ("int8", True): "bc0ce2d7c4e59ad5",
    ("int16", False): "6da69cbfd7f29f03",
    ("int16", True): "a10aabb101a7e117",
    ("int32", False): "dbd16218b41424c4",
    ("int32", True): "21d3430b74a9d347",
    ("int64", False): "50aa539bf12e6702",
    ("int64", True): "05c0fb8076ca9218",
    ("float64", False): "0339ed6a1ec426e1",
    ("float64", True): "38523ea49377cc75",
    ("float32", False): "cd27b0d00523b809",
    ("float32", True): "bfde735c517b7fc3",
    ("uint16", False): "4afe05052cc633f2",
    ("uint16", True): "55b9549fed90f44d",
}


def _scenario(add_item, end_document, add_document, multimodal):
    """Documents of 0, 1 and 2 sequences (some empty) by add_item, then one by add_document."""
    for d in range(5):
        for s in range(d % 3):
            add_item(torch.tensor([(7 * d + 3 * s + k) % 120 for k in range(s + d % 4)]), s)
        end_document()
    add_document(torch.tensor([1, 2, 3, 4, 5]), [2, 3], [1, 2] if multimodal else None)


def _expected(multimodal):
    """(sequences, modes, document boundaries) that _scenario writes."""
    seqs, modes, docs = [], [], [0]
    for d in range(5):
        for s in range(d % 3):
            seqs.append([(7 * d + 3 * s + k) % 120 for k in range(s + d % 4)])
            modes.append(s)
        docs.append(len(seqs))
    seqs += [[1, 2], [3, 4, 5]]
    modes += [1, 2] if multimodal else [0, 0]
    docs.append(len(seqs))
    return seqs, modes, docs


def _write(prefix, dtype, multimodal=False):
    w = IndexedCorpusWriter(prefix, dtype=dtype, multimodal=multimodal)
    _scenario(w.add_item, w.end_document, w.add_document, multimodal)
    w.finalize()
    return str(prefix)


def _bytes(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _digest(prefix) -> str:
    data = _bytes(f"{prefix}.idx") + _bytes(f"{prefix}.bin")
    return hashlib.sha256(data).hexdigest()[:16]


@pytest.mark.parametrize("multimodal", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_round_trips_and_matches_megatron_bytes(tmp_path, dtype, multimodal):
    prefix = _write(tmp_path / "c", dtype, multimodal)
    assert _digest(prefix) == MEGATRON_DIGESTS[dtype, multimodal]
    c = IndexedCorpus(prefix)
    seqs, modes, docs = _expected(multimodal)
    assert (len(c), c.num_documents, c.dtype.name, c.multimodal) == (
        len(seqs),
        len(docs) - 1,
        dtype,
        multimodal,
    )
    assert c.sequence_lengths.dtype == np.int32 and c.sequence_pointers.dtype == np.int64
    assert c.sequence_lengths.tolist() == [len(s) for s in seqs]
    assert c.document_indices.tolist() == docs
    assert c.sequence_pointers.tolist() == list(
        np.cumsum([0] + [len(s) * c.dtype.itemsize for s in seqs[:-1]])
    )
    assert (c.sequence_modes.tolist() if multimodal else c.sequence_modes) == (
        modes if multimodal else None
    )
    for i, s in enumerate(seqs):
        assert c.read(i).dtype == c.dtype and c.read(i).tolist() == s
    assert c.read(len(seqs) - 1, offset=1).tolist() == [4, 5]
    assert c.read(len(seqs) - 1, offset=1, length=1).tolist() == [4]
    for d in range(len(docs) - 1):
        want = [t for s in seqs[docs[d] : docs[d + 1]] for t in s]
        assert c.read_document(d).tolist() == want
    assert c.token_counts().tolist() == [
        sum(len(s) for s in seqs[a:b]) for a, b in zip(docs, docs[1:])
    ]
    c.validate()


def test_writer_add_index_merges_and_refuses_what_megatron_would_write_wrong(tmp_path):
    a = _write(tmp_path / "a", "uint16")
    with IndexedCorpusWriter(tmp_path / "m", dtype="uint16") as w:
        w.add_index(a)
        w.add_index(a)
    m, one = IndexedCorpus(tmp_path / "m"), IndexedCorpus(a)
    assert m.num_documents == 2 * one.num_documents
    assert m.read_document(one.num_documents + 5).tolist() == [1, 2, 3, 4, 5]
    w = IndexedCorpusWriter(tmp_path / "x", dtype="uint8")
    with pytest.raises(ConfigError, match="do not fit uint8"):
        w.add_item([1, 300])  # megatron-core wraps it to 44
    with pytest.raises(ConfigError, match="do not cut 3 tokens"):
        w.add_document([1, 2, 3], [1, 1])


@pytest.mark.integration
def test_writer_matches_megatron_core(tmp_path):
    """Byte equality with megatron-core's own builder, and its reader on fpipe's files
    (megatron-core imports in ~12 s: opt-in with -m integration)."""
    mc = pytest.importorskip("megatron.core.datasets.indexed_dataset")
    for dtype in DTYPES:
        for mm in (False, True):
            theirs = str(tmp_path / f"m-{dtype}-{mm}")
            b = mc.IndexedDatasetBuilder(theirs + ".bin", dtype=getattr(np, dtype), multimodal=mm)
            _scenario(
                lambda t, m, b=b: b.add_item(t, mode=m),
                b.end_document,
                lambda t, lengths, modes, b=b: b.add_document(t, lengths, modes=modes),
                mm,
            )
            b.finalize(theirs + ".idx")
            ours = _write(tmp_path / f"f-{dtype}-{mm}", dtype, mm)
            for ext in (".idx", ".bin"):
                assert _bytes(theirs + ext) == _bytes(ours + ext)
            assert _digest(theirs) == MEGATRON_DIGESTS[dtype, mm]
            ds, c = mc.IndexedDataset(ours, multimodal=mm), IndexedCorpus(theirs)
            for i in range(len(c)):
                got = ds[i][0] if mm else ds[i]
                assert np.array_equal(got, c.read(i))


# -- corrupt files: a typed error naming the file, never a wrong token ----------------------


def _patch(path, offset, data):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def _truncate(path, size):
    with open(path, "r+b") as f:
        f.truncate(size)


N_SEQ = 6  # _scenario: sequences
LENGTHS = HEADER_BYTES
POINTERS = HEADER_BYTES + 4 * N_SEQ
DOCS = POINTERS + 8 * N_SEQ


@pytest.mark.parametrize(
    "damage, file, match",
    [
        (lambda p: _patch(p + ".idx", 0, b"MMIDIDY"), ".idx", "magic"),
        (lambda p: _patch(p + ".idx", 9, struct.pack("<Q", 2)), ".idx", "version 2"),
        (lambda p: _patch(p + ".idx", 17, b"\x09"), ".idx", "dtype code 9"),
        (lambda p: _patch(p + ".idx", 18, struct.pack("<Q", 10)), ".idx", "truncated or"),
        (lambda p: _truncate(p + ".idx", DOCS + 8), ".idx", "truncated or"),
        (lambda p: _truncate(p + ".idx", 20), ".idx", "shorter than"),
        (lambda p: _patch(p + ".idx", DOCS, struct.pack("<q", 1)), ".idx", "from 1 to"),
        (lambda p: _patch(p + ".idx", DOCS + 8 * 6, struct.pack("<q", 8)), ".idx", "to 8"),
        (lambda p: _truncate(p + ".bin", 20), ".bin", "truncated"),
        (lambda p: _truncate(p + ".bin", 0), ".bin", "truncated"),
    ],
)
def test_corrupt_index_is_refused_on_open_naming_the_file(tmp_path, damage, file, match):
    prefix = _write(tmp_path / "c", "uint16")
    damage(prefix)
    with pytest.raises(ConfigError, match=match) as e:
        IndexedCorpus(prefix)
    assert prefix + file in str(e.value)
    with pytest.raises(ConfigError, match=match):  # and as a dataset
        open_dataset(prefix)


def test_missing_bin_is_refused(tmp_path):
    prefix = _write(tmp_path / "c", "uint16")
    (tmp_path / "c.bin").unlink()
    with pytest.raises(ConfigError, match=r"c\.bin: cannot read"):
        IndexedCorpus(prefix)


def test_entries_past_the_bin_or_backwards_are_refused_when_read(tmp_path):
    prefix = _write(tmp_path / "c", "int32")
    _patch(prefix + ".idx", POINTERS + 8 * 2, struct.pack("<q", 10_000))  # sequence 2
    _patch(prefix + ".idx", LENGTHS + 4 * 3, struct.pack("<i", -4))  # sequence 3
    _patch(prefix + ".idx", DOCS + 8 * 4, struct.pack("<q", 1))  # document 3 ends before it starts
    c = IndexedCorpus(prefix)  # O(1) checks pass: the last sequence is intact
    assert c.read(0).tolist() == [7]  # the intact ones still read
    with pytest.raises(BadSampleError, match="outside the") as e:
        c.read(2)
    assert e.value.path == prefix + ".bin" and e.value.key == "c#2"
    with pytest.raises(BadSampleError, match="outside the"):
        c.read(3)
    with pytest.raises(BadSampleError, match="not increasing") as e:
        c.read_document(3)
    assert e.value.path == prefix + ".idx"
    with pytest.raises(ConfigError, match=r"c\.idx: .*sequence 3 has a negative length"):
        c.validate()
    _patch(prefix + ".idx", LENGTHS + 4 * 3, struct.pack("<i", 0))
    with pytest.raises(ConfigError, match=r"c\.idx: .*decreases at entry 4"):
        IndexedCorpus(prefix).token_counts()
    _patch(prefix + ".idx", DOCS + 8 * 4, struct.pack("<q", 3))
    with pytest.raises(ConfigError, match=r"c\.idx: sequence 2 lies at bytes 10000"):
        IndexedCorpus(prefix).validate()


# -- the "megatron" dataset layout -------------------------------------------------------------


def test_prefix_file_and_folder_open_as_datasets(tmp_path):
    _write(tmp_path / "a", "uint16")
    (tmp_path / "sub").mkdir()
    _write(tmp_path / "sub" / "b", "int32", multimodal=True)
    one = open_dataset(tmp_path / "a")
    assert (one.layout, len(one), one.key(5)) == ("megatron", 6, "a#5")
    assert one.column("tokens").tolist() == [0, 1, 5, 0, 0, 5]
    assert one.column("bytes").tolist() == [0, 2, 10, 0, 0, 10]
    assert len(open_dataset(tmp_path / "a.idx")) == len(open_dataset(tmp_path / "a.bin")) == 6
    both = open_dataset(tmp_path)
    assert both.shards == ("a.bin", "sub/b.bin") and both.key(7) == "sub/b#1"
    assert both.column("shard_id").tolist() == [0] * 6 + [1] * 6
    raw = both.read(11)
    assert set(raw) == {"tokens", "lengths", "modes"}
    assert np.frombuffer(raw["modes"], np.int8).tolist() == [1, 2]
    seqs = open_dataset(tmp_path / "a", sample_unit="sequence")
    assert len(seqs) == 6 and seqs.column("tokens").tolist() == [1, 2, 3, 0, 2, 3]
    with pytest.raises(ConfigError, match="sample_unit"):
        open_dataset(tmp_path / "a", sample_unit="page")


def test_plan_columns_read_the_index_only(tmp_path, monkeypatch):
    _write(tmp_path / "a", "uint16")

    def no_bin(*args):
        raise AssertionError("the .bin was read")

    monkeypatch.setattr(IndexedCorpus, "_tokens", no_bin)
    ds = _train(
        tmp_path / "a",
        batch_size=2,
        columns=["tokens"],
        plan_stages=[fpipe.plan.pack({"tokens": 6})],
    )
    _, recipes = ds.plan.next(ds.plan.init(), 1)
    assert recipes[0].refs.column("tokens").tolist() == [5, 5, 1]  # packs of at most 6 tokens


def _train(path, **kw):
    args = dict(batch_size=4, shuffle_buffer_size=8, max_samples_per_sequence=4, seed=3)
    args.update(kw)
    return fpipe.get_train_dataset(str(path), topology=Topology(0, 1), **args)


def _take(loader, n):
    it = iter(loader)
    return [next(it) for _ in range(n)]


def test_documents_reach_the_task_encoder_as_int64_tokens(tmp_path):
    _write(tmp_path / "a", "uint16")
    batch = _take(fpipe.get_loader(_train(tmp_path / "a", shuffle_buffer_size=1)), 1)[0]
    assert batch.__key__[:2] == ["a#0", "a#1"]
    assert batch.tokens.dtype == torch.int64 and batch.tokens.shape[0] == 4
    sample = fpipe.get_loader(_train(tmp_path / "a", batch_size=None, shuffle_buffer_size=1))
    first = _take(sample, 3)[2]
    assert isinstance(first, TokensSample) and first.tokens.tolist() == [14, 15, 17, 18, 19]
    assert first.lengths.tolist() == [2, 3] and first.modes is None


def test_a_bucket_prefix_reads_the_same_tokens(tmp_path, monkeypatch):
    """A URL prefix: the .idx copied to the cache once, the .bin read by ranged GETs (file://
    goes through the same object-store reads as s3://)."""
    monkeypatch.setenv("FPIPE_CACHE", str(tmp_path / "cache"))
    prefix = _write(tmp_path / "c", "int16", multimodal=True)
    url = "file://" + prefix
    remote, local = IndexedCorpus(url), IndexedCorpus(prefix)
    assert remote.multimodal and remote.sequence_modes.tolist() == local.sequence_modes.tolist()
    assert all(remote.read(i).tolist() == local.read(i).tolist() for i in range(len(local)))
    ds = open_dataset(url)
    assert ds.layout == "megatron" and ds.key(5) == "c#5"
    ds.prefetch([4, 5])
    assert ds.read(5) == open_dataset(prefix).read(5)
    assert len(list((tmp_path / "cache" / "megatron").iterdir())) == 1


def test_token_blend_with_an_image_dataset_resumes_exactly(tmp_path):
    make_image_caption_dataset(tmp_path / "img", shards=2, per_shard=6)
    prepare_dataset(
        tmp_path / "img",
        fields={"image": "jpg", "caption": "txt"},
        sample_type="CaptioningSample",
        columns=["tokens=len(json[caption])"],
    )
    (tmp_path / "corpus").mkdir()
    with IndexedCorpusWriter(tmp_path / "corpus" / "wiki", dtype="uint16") as w:
        for d in range(30):
            w.add_document(np.arange(d % 7 + 1) + 100 * d, [d % 7 + 1])
    (tmp_path / "mix.yaml").write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        "    blend_unit: tokens\n    blend:\n"
        "      - {weight: 1, path: corpus/wiki}\n      - {weight: 1, path: img}\n"
    )

    class Encoder(fpipe.TaskEncoder):
        def encode_sample(self, s):
            if isinstance(s, TokensSample):
                return s
            tokens = torch.tensor(list(s.caption.encode()))
            return TokensSample.derive_from(s, tokens=tokens)

        def batch(self, samples):
            return [(s.__key__, s.tokens.tolist()) for s in samples]

    def loader():
        return fpipe.get_loader(_train(tmp_path / "mix.yaml", task_encoder=Encoder()))

    ref = _take(loader(), 8)
    keys = [k for b in ref for k, _ in b]
    wiki = [t for b in ref for k, t in b if k.startswith("wiki#")]
    assert wiki and len(wiki) < len(keys)  # both datasets, by tokens: more short documents
    assert all(
        t == list(range(100 * int(k[5:]), 100 * int(k[5:]) + len(t)))
        for b in ref
        for k, t in b
        if k.startswith("wiki#")
    )  # noqa: E501
    first = loader()
    head = _take(first, 3)
    again = loader()
    again.load_state_dict(first.state_dict())
    assert head + _take(again, 5) == ref
