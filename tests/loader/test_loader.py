"""The loader: order, exact state, stats, val pass, error policy."""

import re

import pytest
import torch

import fpipe
from fpipe.core import SnapshotMismatchError
from fpipe.decode.image import ImageDecodeOptions
from tests.loader.helpers import build, take


@pytest.fixture(scope="module")
def ref(image_dataset):
    """The first batches (digests) of ``build(image_dataset)``, without workers."""
    return take(build(image_dataset), 12)


def test_batches_and_default_collate(image_dataset):
    ds = fpipe.get_train_dataset(
        image_dataset,
        batch_size=5,
        shuffle_buffer_size=8,
        max_samples_per_sequence=3,
        seed=0,
        image_decode=ImageDecodeOptions(target_size=12),
    )
    batch = next(iter(fpipe.get_loader(ds)))
    assert batch.image.shape == (5, 3, 12, 12) and batch.image.dtype == torch.uint8
    assert len(batch.caption) == 5 and all(isinstance(c, str) for c in batch.caption)
    assert len(set(batch.__key__)) == 5


def test_state_resume_in_process(image_dataset, ref):
    loader = build(image_dataset)
    it = iter(loader)
    for _ in range(5):
        next(it)
    sd = loader.state_dict()
    fresh = build(image_dataset)
    fresh.load_state_dict(sd)
    assert take(fresh, 7) == ref[5:12]


def test_restore_during_iteration_restarts_from_the_state(image_dataset, ref):
    loader = build(image_dataset, num_workers=2)
    it = iter(loader)
    next(it), next(it)
    data = loader.snapshot()
    next(it), next(it), next(it)
    loader.restore(data)
    from tests.loader.helpers import digest

    assert [digest(next(it)) for _ in range(3)] == ref[2:5]


def test_state_is_small_and_independent_of_workers_and_step(image_dataset):
    sizes, states = set(), {}
    for nw in (0, 2):
        loader = build(image_dataset, num_workers=nw, prefetch_factor=4)
        it = iter(loader)
        for _ in range(3):
            next(it)
        states[nw] = loader.snapshot()
        sizes.add(len(states[nw]))
        for _ in range(40):  # several epochs later
            next(it)
        sizes.add(len(loader.snapshot()))
    assert states[0] == states[2], "state depends on num_workers / prefetching"
    assert len(sizes) == 1 and max(sizes) <= 1024, sizes


def test_stats(image_dataset):
    loader = build(image_dataset, batch_size=4)
    it = iter(loader)
    for _ in range(30):  # 96 train samples / 4 = 24 batches per epoch
        next(it)
    st = loader.stats()
    assert (st.batches, st.samples, st.skipped, st.epoch) == (30, 120, 0, 1)


def test_snapshot_from_another_config_is_refused(image_dataset):
    loader = build(image_dataset, seed=1)
    with pytest.raises(SnapshotMismatchError, match="seed"):
        build(image_dataset, seed=2).restore(loader.snapshot())


def test_val_dataset_one_pass_in_order(image_dataset):
    ds = fpipe.get_val_dataset(
        image_dataset, batch_size=5, image_decode=ImageDecodeOptions(target_size=8)
    )
    keys = [k for b in fpipe.get_loader(ds) for k in b.__key__]
    from fpipe.storage import open_dataset

    raw = open_dataset(image_dataset)
    assert keys == [raw.key(i) for i in raw.split_indices("val")]
    ds = fpipe.get_val_dataset(
        image_dataset, batch_size=5, limit=2, image_decode=ImageDecodeOptions(target_size=8)
    )
    # limit counts batches, as in Energon (it counted samples)
    assert [b.__key__ for b in fpipe.get_loader(ds)] == [keys[:5], keys[5:10]]


def test_error_policy(tmp_path):
    from fpipe.storage import prepare_dataset
    from tests.storage.helpers import jpeg_bytes, write_tar

    good = jpeg_bytes(16, 16)
    broken = good[:200] + b"\x00" * 50  # header intact (prepare accepts it), body corrupt
    samples = [(f"{i:04d}", {"jpg": broken if i == 3 else good, "txt": b"c"}) for i in range(8)]
    write_tar(tmp_path / "s.tar", samples)
    prepare_dataset(
        tmp_path,
        fields={"image": "jpg", "caption": "txt"},
        sample_type="CaptioningSample",
        split="1,0,0",
    )
    kw = dict(batch_size=4, seed=0, num_epochs=1, image_decode=ImageDecodeOptions(target_size=8))
    ds = fpipe.get_train_dataset(tmp_path, **kw)
    with pytest.raises(fpipe.core.BadSampleError, match=r"s.*0003"):
        list(fpipe.get_loader(ds))
    ds = fpipe.get_train_dataset(tmp_path, error_policy="skip", **kw)
    loader = fpipe.get_loader(ds)
    batches = list(loader)
    assert sum(len(b.__key__) for b in batches) == 7
    assert loader.stats().skipped == 1 and loader.stats().samples == 7


def test_restore_in_a_fresh_process(image_dataset, ref, tmp_path, fresh_process):
    loader = build(image_dataset, num_workers=1)
    it = iter(loader)
    for _ in range(4):
        next(it)
    (tmp_path / "state.bin").write_bytes(loader.snapshot())
    [got] = fresh_process.restore(image_dataset, [str(tmp_path / "state.bin")], after=5, seed=3)
    assert got == ref[4:9]


def test_stats_count_the_dropped_remainder_at_the_end(image_dataset):
    # 96 train samples, global batch 10 with drop_last: 9 batches, 6 samples dropped.
    ds = fpipe.get_train_dataset(
        image_dataset,
        batch_size=10,
        seed=0,
        num_epochs=1,
        image_decode=ImageDecodeOptions(target_size=8),
    )
    loader = fpipe.get_loader(ds, num_workers=1)
    assert len(list(loader)) == 9
    st = loader.stats()
    assert st.samples == 90 and st.dropped["global_remainder"] == 6


@pytest.mark.parametrize(
    "value",
    [2**40, -1, "abc", 3.5, None, [1, 2], {"a": 1}],
)
def test_load_state_dict_refuses_non_bytes_without_allocating(image_dataset, value):
    """``bytes(2**40)`` would allocate a terabyte: only bytes-like values are accepted."""
    loader = build(image_dataset)
    with pytest.raises(fpipe.core.SnapshotError, match="snapshot must be bytes"):
        loader.load_state_dict({"fpipe_snapshot": value})
    with pytest.raises(fpipe.core.SnapshotError, match="expected the dict"):
        loader.load_state_dict(value)


@pytest.mark.parametrize("field", ["plan.st.step", "plan.up.up.up.epoch", "batches"])
def test_checksummed_snapshot_with_a_value_past_64_bits_is_refused_on_restore(image_dataset, field):
    """2**64 - 1 fits the snapshot's integers (and its checksum is rewritten): it is refused
    naming the field, not an OverflowError while iterating (nothing bounds this run's epochs)."""
    import msgspec

    from fpipe.loader.state import encode_loader_state

    loader = build(image_dataset)
    it = iter(loader)
    next(it), next(it)

    def edit(value, names):
        if not names:
            return 2**64 - 1
        inner = edit(getattr(value, names[0]), names[1:])
        return msgspec.structs.replace(value, **{names[0]: inner})

    data = encode_loader_state(loader.plan, edit(loader._state, field.split(".")))
    fresh = build(image_dataset)
    with pytest.raises(
        fpipe.core.SnapshotError, match=re.escape(f"state.{field} is {2**64 - 1}: it must be")
    ):
        fresh.restore(data)


def test_load_state_dict_accepts_bytes_like_and_uint8_tensors(image_dataset):
    import numpy as np

    loader = build(image_dataset)
    it = iter(loader)
    next(it), next(it)
    data = loader.snapshot()
    ref = take(loader, 3)
    for value in (
        data,
        bytearray(data),
        memoryview(data),
        torch.frombuffer(bytearray(data), dtype=torch.uint8),
        np.frombuffer(data, np.uint8),
    ):
        fresh = build(image_dataset)
        fresh.load_state_dict({"fpipe_snapshot": value})
        assert take(fresh, 3) == ref
    with pytest.raises(fpipe.core.SnapshotError, match="dtype"):
        build(image_dataset).load_state_dict({"fpipe_snapshot": torch.zeros(4, dtype=torch.int64)})
