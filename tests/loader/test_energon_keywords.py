"""Energon 7.4's keywords of get_train_dataset / get_val_dataset and WorkerConfig's fields, with
Energon's meaning (task_encoder/loader.py, flavors/webdataset, wrappers/epochize_dataset.py,
worker.py), or refused with the reason and the fpipe way."""

from __future__ import annotations

import collections
import json
import pickle

import pytest

import fpipe
from fpipe.core.errors import BadSampleError, ConfigError, MaterializeError
from fpipe.loader import Topology, WorkerConfig
from tests.distributed.helpers import batch_keys, make_text_dataset

WC = WorkerConfig(rank=0, world_size=1, num_workers=0)


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    return make_text_dataset(tmp_path_factory.mktemp("ekw"), shards=5, per_shard=10)  # 50


def _keys(loader, n=None):
    out = []
    for i, batch in enumerate(loader):
        if n is not None and i >= n:
            break
        out.extend(k.rsplit("/", 1)[-1] for k in batch_keys(batch))  # shard-00/00003 -> 00003
    return out


def _train(path, **kw):
    args = dict(batch_size=5, worker_config=WC, shuffle_buffer_size=None,
                max_samples_per_sequence=None)  # fmt: skip
    args.update(kw)
    return fpipe.get_train_dataset(path, **args)


# --- item 1: dataset keywords -------------------------------------------------------------------


def test_split_part_is_the_split(text):
    ds = fpipe.get_val_dataset(text, split_part="train", batch_size=10, worker_config=WC)
    assert ds.split == "train" and len(_keys(fpipe.get_loader(ds))) == 50
    assert _train(text, split_part="train").split == "train"
    with pytest.raises(ConfigError, match="split_part is Energon's name for split"):
        fpipe.get_val_dataset(
            text, split="test", split_part="train", batch_size=2, worker_config=WC
        )


def test_virtual_epoch_length_ends_each_loop_and_the_next_goes_on(text):
    # Energon's test_loader: batch 10, virtual epoch 2: len 2, each loop 2 batches, continuing
    ds = _train(text, batch_size=10, virtual_epoch_length=2, max_samples_per_sequence=3, seed=4)
    loader = fpipe.get_loader(ds)
    assert len(ds) == len(loader) == 2
    loops = [_keys(loader) for _ in range(10)]
    assert [len(loop) for loop in loops] == [2 * 10] * 10
    endless = fpipe.get_loader(_train(text, batch_size=10, max_samples_per_sequence=3, seed=4))
    assert [k for loop in loops for k in loop] == _keys(endless, 20)
    # 200 samples: every one of the 50 four times (Energon: "approximately uniformly")
    assert set(collections.Counter(k for loop in loops for k in loop).values()) == {4}


def test_virtual_epoch_position_survives_a_restore(text):
    ds = _train(text, batch_size=5, virtual_epoch_length=4, seed=2, max_samples_per_sequence=4)
    loader = fpipe.get_loader(ds)
    first = next(iter(loader))
    state = loader.state_dict()
    again = fpipe.get_loader(ds)
    again.load_state_dict(state)
    rest = [batch_keys(b) for b in again]  # the rest of the virtual epoch: 3 batches
    assert len(rest) == 3
    full = [batch_keys(b) for b in fpipe.get_loader(ds)]
    assert [batch_keys(first)] + rest == full


def test_shuffle_over_epochs_multiplier_shuffles_slices_over_passes(text):
    ds = _train(text, shuffle_over_epochs_multiplier=2, max_samples_per_sequence=5, seed=1,
                num_epochs=2)  # fmt: skip
    keys = _keys(fpipe.get_loader(ds))
    assert len(keys) == 100 and set(collections.Counter(keys).values()) == {2}
    first_pass = collections.Counter(keys[:50])
    assert max(first_pass.values()) == 2  # slices drawn over two passes: a repeat in pass one
    plain = _keys(fpipe.get_loader(_train(text, max_samples_per_sequence=5, seed=1, num_epochs=2)))
    assert set(collections.Counter(plain[:50]).values()) == {1}
    # None: slices in index order (Energon: no shuffle of the slices)
    ordered = _keys(fpipe.get_loader(_train(text, shuffle_over_epochs_multiplier=None)), 4)
    assert ordered == [f"{i:05d}" for i in range(20)]


def test_shuffle_over_epochs_multiplier_refusals(text):
    with pytest.raises(ConfigError, match="drawn with replacement forever"):
        _train(text, shuffle_over_epochs_multiplier=-1, num_epochs=2)
    with pytest.raises(ConfigError, match=">= 1, None or -1"):
        _train(text, shuffle_over_epochs_multiplier=-2)
    with pytest.raises(ConfigError, match="multiple of 2"):
        _train(text, shuffle_over_epochs_multiplier=2, num_epochs=3)


def test_parallel_shard_iters_interleaves_slices_each_in_order(text):
    ds = _train(text, parallel_shard_iters=3, max_samples_per_sequence=5, seed=7, repeat=False)
    keys = _keys(fpipe.get_loader(ds))
    assert sorted(keys) == [f"{i:05d}" for i in range(50)]  # every sample once per epoch
    plain = _keys(fpipe.get_loader(_train(text, max_samples_per_sequence=5, seed=7, repeat=False)))
    assert keys != plain
    by_slice = collections.defaultdict(list)
    for k in keys:
        by_slice[int(k) // 5].append(int(k))
    assert all(v == sorted(v) for v in by_slice.values())  # each slice read in order
    # within each group of 3 slices of the plain order, the interleaved order has the same keys
    assert all(sorted(keys[i : i + 15]) == sorted(plain[i : i + 15]) for i in range(0, 45, 15))
    with pytest.raises(ConfigError, match="do not combine"):
        _train(text, parallel_shard_iters=2, shuffle_over_epochs_multiplier=None)


class _FailsOn3(fpipe.DefaultTaskEncoder):
    def encode_sample(self, sample):
        if sample.__key__.endswith("00003"):
            raise ValueError("no good")
        return sample


def test_handler_is_called_and_the_sample_skipped(text):
    calls = []
    ds = fpipe.get_val_dataset(
        text,
        split_part="train",
        batch_size=10,
        worker_config=WC,
        task_encoder=_FailsOn3(),
        handler=lambda e, key, sources: calls.append((type(e), key)),
    )
    keys = _keys(fpipe.get_loader(ds))
    assert len(keys) == 49 and not any(k.endswith("00003") for k in keys)
    # as in Energon, the second argument is the sample the failing hook got
    assert len(calls) == 1 and calls[0][0] is ValueError
    assert isinstance(calls[0][1], fpipe.TextSample) and calls[0][1].__key__.endswith("00003")
    # Megatron-LM's print_error_handler(exc, key) takes two arguments
    two = []
    ds = fpipe.get_val_dataset(
        text,
        split_part="train",
        batch_size=10,
        worker_config=WC,
        task_encoder=_FailsOn3(),
        handler=lambda e, key: two.append(key),
    )
    assert len(_keys(fpipe.get_loader(ds))) == 49 and two == [calls[0][1].__key__]
    # without a handler the failure stops the loader, as before
    ds = fpipe.get_val_dataset(
        text, split_part="train", batch_size=10, worker_config=WC, task_encoder=_FailsOn3()
    )
    with pytest.raises(MaterializeError, match="no good"):
        _keys(fpipe.get_loader(ds))


def test_a_raising_handler_stops_the_loader(text):
    def reraise(e, key, sources):
        raise e

    ds = _train(text, task_encoder=_FailsOn3(), handler=reraise, repeat=False)
    with pytest.raises((ValueError, BadSampleError, MaterializeError), match="no good"):
        _keys(fpipe.get_loader(ds))


def test_image_decode_pil_gives_pil_images(image_dataset):
    from PIL import Image

    ds = fpipe.get_train_dataset(image_dataset, batch_size=2, worker_config=WC,
                                 shuffle_buffer_size=None, max_samples_per_sequence=None,
                                 image_decode="pil")  # fmt: skip
    batch = next(iter(fpipe.get_loader(ds)))
    assert isinstance(batch.image[0], Image.Image) and batch.image[0].mode == "RGB"
    val = fpipe.get_val_dataset(image_dataset, batch_size=2, worker_config=WC,
                                image_decode="torchrgb")  # fmt: skip
    image = next(iter(fpipe.get_loader(val))).image
    assert str(image.dtype) == "torch.float32" and float(image.max()) <= 1.0

    class Own(fpipe.DefaultTaskEncoder):
        decoder = fpipe.SampleDecoder(image_decode="torchrgb8")

    with pytest.raises(ConfigError, match="already has decoder"):
        fpipe.get_val_dataset(image_dataset, batch_size=2, worker_config=WC,
                              task_encoder=Own(), image_decode="pil")  # fmt: skip


# --- item 2: WorkerConfig fields ---------------------------------------------------------------


def test_seed_offset_is_the_seed(text):
    def keys(**kw):
        wc = WorkerConfig(rank=0, world_size=1, num_workers=0, **kw.pop("wc", {}))
        return _keys(fpipe.get_loader(_train(text, worker_config=wc, max_samples_per_sequence=2,
                                             shuffle_buffer_size=8, **kw)), 4)  # fmt: skip

    assert keys(wc={"seed_offset": 5}) == keys(seed=5) != keys(wc={"seed_offset": 6})
    assert keys(wc={"seed_offset": 5}, seed=5) == keys(seed=5)
    with pytest.raises(ConfigError, match="give one of them"):
        keys(wc={"seed_offset": 5}, seed=3)


def test_global_error_handler_skips_and_takes_precedence(text):
    seen, ignored = [], []
    wc = WorkerConfig(
        rank=0,
        world_size=1,
        num_workers=0,
        global_error_handler=lambda e, key, sources: seen.append(key),
    )
    ds = fpipe.get_val_dataset(
        text,
        split_part="train",
        batch_size=10,
        worker_config=wc,
        task_encoder=_FailsOn3(),
        handler=lambda e, k: ignored.append(k),
    )
    assert len(_keys(fpipe.get_loader(ds))) == 49
    assert len(seen) == 1 and ignored == []
    with pytest.raises(ConfigError, match="callable"):
        WorkerConfig(rank=0, world_size=1, num_workers=0, global_error_handler="log")


def test_worker_debug_log_lists_each_batch(text, tmp_path):
    wc = WorkerConfig(
        rank=0,
        world_size=1,
        num_workers=0,
        worker_log_level=1,
        worker_debug_path=str(tmp_path / "debug" / "{worker_id}_{pid}.jsonl"),
    )
    ds = fpipe.get_val_dataset(text, split_part="train", batch_size=20, worker_config=wc)
    loader = fpipe.get_loader(ds)
    delivered = [batch_keys(b) for b in loader]
    again = [batch_keys(b) for b in loader]  # a second pass
    # the folder is created; Energon's main-process file (rank * (num_workers + 1)) and lines
    (log,) = (tmp_path / "debug").glob("0_*.jsonl")
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert {line["t"] for line in lines} == {"SavableDataLoader.yield"}
    assert [line["idx"] for line in lines] == [0, 1, 2, 0, 1, 2]
    assert [line["global_idx"] for line in lines] == list(range(6))
    assert [line["keys"] for line in lines] == delivered + again
    quiet = WorkerConfig(
        rank=0, world_size=1, num_workers=0, worker_debug_path=str(tmp_path / "quiet.jsonl")
    )  # level 0: no log
    list(fpipe.get_loader(fpipe.get_val_dataset(text, batch_size=20, worker_config=quiet,
                                                split_part="train")))  # fmt: skip
    assert not (tmp_path / "quiet.jsonl").exists()


def test_worker_config_fields_survive_pickling_and_repr():
    wc = WorkerConfig(rank=1, world_size=2, num_workers=3, seed_offset=9, worker_log_level=2,
                      worker_debug_path="/tmp/x", global_error_handler=print)  # fmt: skip
    back = pickle.loads(pickle.dumps(wc))
    assert (back.seed_offset, back.worker_log_level, back.worker_debug_path) == (9, 2, "/tmp/x")
    assert back.global_error_handler is print
    assert repr(Topology(1, 4)) == "Topology(rank=1, world_size=4)"


class HandlerSaysStop(Exception):
    """What a test's error handler raises (module level: it travels back from a worker)."""


@pytest.mark.parametrize("workers", [0, 1])
def test_what_a_handler_raises_reaches_the_user_as_it_is(text, workers):
    def stop(e, sample, sources):
        raise HandlerSaysStop(sample.__key__) from e

    ds = _train(text, task_encoder=_FailsOn3(), handler=stop, repeat=False)
    with pytest.raises(HandlerSaysStop, match="00003"):
        _keys(fpipe.get_loader(ds, num_workers=workers))
