"""Energon's packing hooks with a packing buffer: order of hooks, new objects, buffer size,
exact resume from inside a buffer and independence from the number of workers."""

import itertools

import pytest

import fpipe
from fpipe.core.errors import ConfigError
from fpipe.decode.image import ImageDecodeOptions
from fpipe.encode import DefaultTaskEncoder
from fpipe.samples import TextSample

DECODE = ImageDecodeOptions(target_size=8)


class EncodeThenPack(DefaultTaskEncoder):
    """Overrides encode_sample (not preencode): Energon runs it before selection."""

    def encode_sample(self, sample, rng):
        return TextSample(text=f"enc:{sample.caption}", __key__=sample.__key__)

    def select_samples_to_pack(self, samples):
        assert all(s.text.startswith("enc:") for s in samples), "encode_sample was not run"
        return [samples[i : i + 3] for i in range(0, len(samples), 3)]

    def pack_selected_samples(self, samples):
        return TextSample(
            text="|".join(s.text for s in samples), __key__="+".join(s.__key__ for s in samples)
        )

    def encode_batch(self, batch):
        return {"texts": batch.text, "keys": batch.__key__}


class Trace(DefaultTaskEncoder):
    """Records the hook order in the samples; selection returns *new* objects."""

    def preencode_sample(self, sample, rng):
        return TextSample(text="pre", __key__=sample.__key__)

    def select_samples_to_pack(self, samples):
        # New objects (Energon allows any objects): reversed pairs, copies of the samples.
        fresh = [s.replace(text=s.text + ">sel") for s in reversed(samples)]
        return [fresh[i : i + 2] for i in range(0, len(fresh), 2)]

    def postencode_sample(self, sample, rng):
        return sample.replace(text=f"{sample.text}>post{int(rng.integers(100))}")

    def pack_selected_samples(self, samples):
        assert all(">post" in s.text for s in samples), "postencode_sample must run before"
        return TextSample(
            text=" & ".join(s.text for s in samples), __key__="+".join(s.__key__ for s in samples)
        )

    def encode_batch(self, batch):
        return {"texts": batch.text, "keys": batch.__key__}


def _dataset(path, encoder, **kw):
    kw.setdefault("packing_buffer_size", 7)
    return fpipe.get_train_dataset(
        path, batch_size=2, seed=3, task_encoder=encoder, image_decode=DECODE, **kw
    )


def _take(ds, n, num_workers=0):
    it = iter(fpipe.get_loader(ds, num_workers=num_workers))
    return [next(it) for _ in range(n)]


def test_encode_sample_runs_before_selection(image_dataset):
    batches = _take(_dataset(image_dataset, EncodeThenPack()), 3)
    for b in batches:
        assert all(t.startswith("enc:") for t in b["texts"])


def test_select_may_return_new_objects_and_postencode_runs_per_selected_sample(image_dataset):
    batches = _take(_dataset(image_dataset, Trace()), 4)
    for b in batches:
        for text in b["texts"]:
            for part in text.split(" & "):
                assert part.startswith("pre>sel>post")


def test_packing_buffer_size_sets_the_buffer_and_batch_size_counts_packs(image_dataset):
    # 7 samples per buffer, packs of 3: 3 packs per buffer (3 + 3 + 1); batches of 2 packs
    # take packs across buffer boundaries, so every batch has exactly 2 packs.
    batches = _take(_dataset(image_dataset, EncodeThenPack()), 6)
    assert all(len(b["texts"]) == 2 for b in batches)
    sizes = [k.count("+") + 1 for b in batches for k in b["keys"]]
    assert sizes == [3, 3, 1] * 4
    keys = [k for b in batches for key in b["keys"] for k in key.split("+")]
    assert len(keys) == len(set(keys)) == 28  # four buffers, each sample once


def test_packing_hooks_are_not_called_without_a_packing_buffer(image_dataset):
    # Energon packs only when packing_buffer_size is set; an encoder that defines the hooks
    # (for the packing path) then batches its encoded samples one by one.
    batches = _take(_dataset(image_dataset, EncodeThenPack(), packing_buffer_size=None), 3)
    keys = [k for b in batches for k in b["keys"]]
    assert all(len(b["keys"]) == 2 for b in batches)
    assert all("+" not in k for k in keys) and len(set(keys)) == 6
    assert all(t.startswith("enc:") and "|" not in t for b in batches for t in b["texts"])


def test_pre_and_encode_sample_both_overridden_is_refused(image_dataset):
    class Both(EncodeThenPack):
        def preencode_sample(self, sample, rng):
            return sample

    with pytest.raises(ConfigError, match="preencode_sample"):
        _dataset(image_dataset, Both())


def test_same_batches_with_workers_and_exact_resume_inside_a_buffer(image_dataset):
    ds = _dataset(image_dataset, Trace(), packing_buffer_size=9)
    ref = _take(ds, 8)
    assert _take(ds, 8, num_workers=2) == ref
    for cut in (1, 2, 3):
        loader = fpipe.get_loader(ds, num_workers=0)
        it = iter(loader)
        head = [next(it) for _ in range(cut)]
        snap = loader.state_dict()
        resumed = fpipe.get_loader(_dataset(image_dataset, Trace(), packing_buffer_size=9))
        resumed.load_state_dict(snap)
        it2 = iter(resumed)
        assert head + [next(it2) for _ in range(8 - cut)] == ref


@pytest.mark.parametrize("drop_last", [True, False])
def test_end_of_epoch_short_batch_of_packs_is_counted_or_kept(image_dataset, drop_last):
    ds = _dataset(image_dataset, EncodeThenPack(), num_epochs=1, drop_last=drop_last)
    loader = fpipe.get_loader(ds)
    batches = list(loader)
    keys = [k for b in batches for key in b["keys"] for k in key.split("+")]
    stats = loader.stats()
    # 96 samples in buffers of 7 (the last one holds 5): 13 * 3 + 2 = 41 packs.
    if drop_last:
        assert len(batches) == 20 and stats.dropped["pack_remainder"] == 2
    else:
        assert len(batches) == 21 and len(batches[-1]["keys"]) == 1
    assert stats.samples == len(keys) == len(set(keys)) == 96 - (2 if drop_last else 0)


def test_val_dataset_with_packing_buffer_keeps_every_sample(image_dataset):
    ds = fpipe.get_val_dataset(
        image_dataset,
        batch_size=2,
        task_encoder=EncodeThenPack(),
        image_decode=DECODE,
        split="train",
        packing_buffer_size=7,
    )
    batches = list(fpipe.get_loader(ds))
    keys = [k for b in batches for key in b["keys"] for k in key.split("+")]
    assert len(keys) == len(set(keys)) == 96  # the short last batch is kept
    assert len(batches[-1]["keys"]) == 1


class UnevenPacker(DefaultTaskEncoder):
    """Packs of 1, 2, 3, ... samples: buffers of different ranks yield different pack counts."""

    def select_samples_to_pack(self, samples):
        groups, i, n = [], 0, 1
        while i < len(samples):
            groups.append(samples[i : i + n])
            i, n = i + n, n + 1
        return groups

    def pack_selected_samples(self, samples):
        return TextSample(text="", __key__="+".join(s.__key__ for s in samples))

    def encode_batch(self, batch):
        return [k for pack in batch.__key__ for k in pack.split("+")]


def test_snapshot_continues_on_its_own_rank_and_world_size_only(image_dataset):
    """Each rank's packs come from its own buffers, so its snapshot holds its own place: it
    restores exactly on the same rank of the same world size, and is refused (naming what to
    change) on another rank, world size or packing_buffer_size instead of repeating or losing
    samples. The consistency check compares these states per rank (they may differ)."""
    from fpipe.core.errors import SnapshotMismatchError
    from fpipe.loader import Topology

    def loader(rank, world, size=5):
        ds = fpipe.get_train_dataset(
            image_dataset, batch_size=2, seed=3, task_encoder=UnevenPacker(),
            image_decode=DECODE, packing_buffer_size=size, topology=Topology(rank, world),
        )  # fmt: skip
        return fpipe.get_loader(ds)

    full = [list(itertools.islice(iter(loader(r, 2)), 6)) for r in range(2)]
    snaps = []
    for r in range(2):
        x = loader(r, 2)
        it = iter(x)
        assert [next(it) for _ in range(3)] == full[r][:3]
        snaps.append(x.state_dict()["fpipe_snapshot"])
    assert snaps[0] != snaps[1]  # the ranks are at different places of their own buffers
    for r in range(2):
        resumed = loader(r, 2)
        resumed.load_state_dict({"fpipe_snapshot": snaps[r]})
        assert list(itertools.islice(iter(resumed), 3)) == full[r][3:]
    refused = [
        (0, 1, 5, "world_size"),
        (0, 3, 5, "world_size"),
        (1, 2, 5, "rank"),
        (0, 2, 6, "packing_buffer_size"),
    ]
    for rank, world, size, field in refused:
        with pytest.raises(SnapshotMismatchError, match=f"field '{field}' differs") as err:
            loader(rank, world, size).load_state_dict({"fpipe_snapshot": snaps[0]})
        assert "plan_stages=[fpipe.plan.pack(...)]" in str(err.value)


def test_consistency_check_compares_pack_buffer_states_per_rank(image_dataset, monkeypatch):
    """With packing hooks the ranks' states differ by design: the save-time check must compare
    them per data-parallel rank (replicas only), not across ranks as in plain global mode."""
    import fpipe.loader.consistency as consistency
    from fpipe.loader import Topology

    calls = []
    monkeypatch.setattr(consistency, "consistency_enabled", lambda flag, group=None: True)
    monkeypatch.setattr(consistency, "check_state_consistency", lambda d, **kw: calls.append(kw))
    for size, key in [(5, 1), (None, 0)]:
        ds = fpipe.get_train_dataset(
            image_dataset, batch_size=2, seed=3, task_encoder=UnevenPacker() if size else None,
            image_decode=DECODE, packing_buffer_size=size, topology=Topology(1, 2),
        )  # fmt: skip
        fpipe.get_loader(ds).state_dict()
        assert calls.pop()["replica_key"] == key


class Keyed(EncodeThenPack):
    """Packs are samples whose restore key the hook leaves empty (Megatron-LM's way)."""

    def pack_selected_samples(self, samples):
        return TextSample(
            text="|".join(s.text for s in samples),
            __key__="+".join(s.__key__ for s in samples),
            __restore_key__=(),
        )

    def encode_batch(self, batch):
        return {"texts": batch.text, "keys": batch.__key__, "rk": batch.__restore_key__}

    def encode_sample(self, sample, rng):
        return TextSample(
            text=f"enc:{sample.caption}",
            __key__=sample.__key__,
            __restore_key__=sample.__restore_key__,
        )


def test_a_pack_restore_key_names_its_buffer_and_samples(image_dataset):
    batches = _take(_dataset(image_dataset, Keyed()), 4)
    for b in batches:
        for key, rk in zip(b["keys"], b["rk"]):
            assert rk[0] == "PackingDataset" and len(rk) == 3 + key.count("+") + 1
            assert all(len(m) == 3 for m in rk[3:])  # each sample's (dataset, index, epoch)


def test_restore_sample_rebuilds_a_batch_of_packs(image_dataset):
    ds = _dataset(image_dataset, Keyed())
    loader = fpipe.get_loader(ds, num_workers=0)
    it = iter(loader)
    batches = [next(it) for _ in range(5)]
    assert loader.can_restore_sample()
    for b in batches[1:]:  # batch 1 takes packs of two buffers (3 packs per buffer)
        again = loader.restore_sample(b["rk"])
        assert again == b
    with pytest.raises(ConfigError, match="no pack of this rank's plan"):
        loader.restore_sample((("PackingDataset", 0, 7, (0, 0, 0)),))


def test_len_with_packing_is_energons_estimate(image_dataset):
    # Energon counts each pack as one sample: the length the samples have unpacked.
    packed = _dataset(image_dataset, Keyed(), repeat=False)
    plain = _dataset(image_dataset, Keyed(), repeat=False, packing_buffer_size=None)
    assert len(packed) == len(plain) == 96 // 2  # 8 train shards of 12, batches of 2
    val = fpipe.get_val_dataset(
        image_dataset,
        batch_size=2,
        task_encoder=Keyed(),
        packing_buffer_size=7,
        image_decode=DECODE,
    )
    assert len(val) == 6  # 12 samples
