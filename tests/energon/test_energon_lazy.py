"""Energon's ``Lazy`` references and ``@cooker(need_cache=True)`` on fpipe: a cooker gets a
cache pool as ``cache``, ``cache.get_lazy(store, name)`` defers the read of an auxiliary file
until ``lazy.get(sample)`` (in ``postencode_sample`` or ``pack_selected_samples``), and the
output is the same for any worker count and after a restore (a read is a pure function of its
reference). From Energon 7.4's ``cache/base.py``, ``cache/no_cache.py`` and the cookers of its
``tests/test_crudedataset.py``.
"""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest

from fpipe.encode import sample_rng
from fpipe.energon import (
    Cooker,
    DefaultTaskEncoder,
    Lazy,
    MockLazy,
    NoCachePool,
    Sample,
    SourceInfo,
    SystemFileStore,
    TextSample,
    basic_sample_keys,
    cooker,
    get_loader,
    get_train_dataset,
    stateless,
)
from tests.energon.energon_folder import CRUDE_CONFIG as CRUDE
from tests.energon.energon_folder import TEXT_CONFIG as TEXT
from tests.energon.energon_folder import make_plain_energon_folder

N = 12  # samples of the crude dataset (txt: n + 10)


@dataclasses.dataclass
class LazyText(Sample):
    n: int
    here: str
    nxt: Lazy[str]  # subscriptable, as in Energon's test module
    other: Lazy[str]


@stateless
@cooker(need_cache=True, need_primary=True)
def cook_lazy(sample: dict, primary, texts, cache) -> LazyText:
    n = sample["json"]["n"]
    return LazyText(
        **basic_sample_keys(sample),
        n=n,
        here=primary.get(".txt", sample),  # `.member`: this sample's own member
        nxt=cache.get_lazy(primary, f"{(n + 1) % N:06d}.txt"),
        other=cache.get_lazy(texts, f"{n % 4:06d}.txt"),
    )


def _resolved(sample: LazyText, noise: int = 0) -> TextSample:
    nxt, other = sample.nxt.get(sample), sample.other.get(sample)
    return TextSample.derive_from(sample, text=f"{sample.n}|{sample.here}|{nxt}|{other}|{noise}")


class PostencodeEncoder(DefaultTaskEncoder):
    cookers = [Cooker(cook_lazy)]

    def postencode_sample(self, sample):
        return _resolved(sample, int(sample_rng().integers(1000)))  # exact as well


class PackingEncoder(DefaultTaskEncoder):
    cookers = [Cooker(cook_lazy)]

    def select_samples_to_pack(self, samples):
        return [[s] for s in samples]

    @stateless
    def pack_selected_samples(self, samples):
        return _resolved(samples[0])


@pytest.fixture(scope="module")
def mds(tmp_path_factory):
    root = tmp_path_factory.mktemp("lazy")
    make_plain_energon_folder(root / "crude", CRUDE, shards=3, per_shard=4)
    make_plain_energon_folder(root / "texts", TEXT, shards=1, per_shard=4)  # txt 10..13
    path = root / "lazy.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            __module__: megatron.energon
            __class__: MetadatasetV2
            splits:
              train:
                path: crude
                aux:
                  texts: texts
            """
        )
    )
    return str(path)


def _loader(mds, encoder, num_workers, packing):
    ds = get_train_dataset(
        mds,
        batch_size=2,
        shuffle_buffer_size=4,
        max_samples_per_sequence=2,
        task_encoder=encoder,
        packing_buffer_size=2 if packing else None,
    )
    return get_loader(ds, num_workers=num_workers)


def _texts(loader, n):
    return [tuple(b.text) for _, b in zip(range(n), loader)]


@pytest.mark.parametrize(
    ("encoder", "packing"), [(PostencodeEncoder, False), (PackingEncoder, True)]
)
def test_lazy_aux_reads_are_exact_across_workers_and_restore(mds, encoder, packing):
    with _loader(mds, encoder(), 0, packing) as loader:
        serial = _texts(loader, 15)
    for texts in serial:
        for text in texts:
            n, here, nxt, other, _ = text.split("|")
            assert (here, nxt, other) == (
                str(int(n) + 10),
                str((int(n) + 1) % N + 10),
                str(int(n) % 4 + 10),
            )
    with _loader(mds, encoder(), 2, packing) as loader:
        first = _texts(loader, 6)
        state = loader.save_state_rank()
        rest = _texts(loader, 9)
    assert first + rest == serial  # any worker count
    with _loader(mds, encoder(), 2, packing) as loader:
        loader.restore_state_rank(state)
        assert _texts(loader, 9) == rest  # a restore reads the same references again


def test_lazy_get_records_the_source_of_what_it_read(mds):
    with _loader(mds, PostencodeEncoder(), 0, False) as loader:
        batch = next(iter(loader))
    # the default batch holds one tuple of records per sample
    names = {name for info in batch.__sources__[0] for name in info.file_names}
    n = int(batch.text[0].split("|")[0])
    assert {f"{(n + 1) % N:06d}.txt", f"{n % 4:06d}.txt"} <= names
    # a read by name is recorded as Energon records it: the name, and the shard it is in
    other = f"{n % 4:06d}.txt"
    texts = str(Path(mds).parent / "texts")
    want = SourceInfo(
        dataset_path=texts, index=other, shard_name="parts/data-0.tar", file_names=(other,)
    )
    assert want in batch.__sources__[0]


def test_pools_and_lazies_outside_a_loader(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"alpha")
    store, pool = SystemFileStore(tmp_path), NoCachePool()
    lazy = pool.get_lazy(store, "a.txt")
    assert lazy == pool.get_lazy(store, "a.txt") and len({lazy, pool.get_lazy(store, "a.txt")}) == 1
    sample = {"__sources__": ()}
    assert lazy.get(sample) == b"alpha" and sample["__sources__"][0].file_names == ("a.txt",)
    assert pool.to_cache([1, 2], "x").get() == [1, 2]
    assert MockLazy("f", lambda name: name.upper()).get() == "F"
    with pytest.raises(Exception, match="leaves"):
        store["../outside.txt"]
