"""Energon's slices through ``fpipe.energon.get_train_dataset`` (Energon 7.4
``flavors/webdataset/sharder.py``, ``sample_loader.py``): ``max_samples_per_sequence=None``
reads each shard whole and in order, only the order of the shards shuffled (Energon's
test_crudedataset test_media_metadata_webdataset relies on it); a limit cuts a long shard into
nearly equal slices, never across a shard or a worker's part. Exact and worker-independent as
fpipe's own orders; fpipe's own API keeps its default (single samples shuffled)."""

from __future__ import annotations

import json

import pytest

import fpipe
from fpipe.core.errors import ConfigError
from fpipe.energon import WorkerConfig, get_train_dataset
from tests.distributed.helpers import batch_keys, make_text_dataset

WC = WorkerConfig(rank=0, world_size=1, num_workers=0)
PER_SHARD = 5


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_text_dataset(tmp_path_factory.mktemp("seq") / "d", shards=4, per_shard=PER_SHARD)


def _numbers(ds, n, *, num_workers=0):
    with fpipe.get_loader(ds, num_workers=num_workers) as loader:
        out = []
        for batch in loader:
            out.extend(int(k.rsplit("/", 1)[-1]) for k in batch_keys(batch))
            if len(out) >= n:
                return out[:n]
    return out


def _runs(numbers):
    """Consecutive runs of consecutive numbers."""
    runs = [[numbers[0]]]
    for x in numbers[1:]:
        if x == runs[-1][-1] + 1:
            runs[-1].append(x)
        else:
            runs.append([x])
    return runs


def _train(path, **kw):
    args = dict(batch_size=2, worker_config=WC, shuffle_buffer_size=None, seed=5)
    return get_train_dataset(path, **{**args, **kw})


def test_no_limit_reads_whole_shards_in_order(data):
    epochs = [_numbers(_train(data, max_samples_per_sequence=None, seed=s), 20) for s in range(4)]
    shard_orders = set()
    for numbers in epochs:
        assert sorted(numbers) == list(range(20))
        runs = [numbers[i : i + PER_SHARD] for i in range(0, 20, PER_SHARD)]
        for run in runs:  # each shard whole and in order
            assert run == list(range(run[0], run[0] + PER_SHARD)) and run[0] % PER_SHARD == 0
        shard_orders.add(tuple(run[0] for run in runs))
    assert len(shard_orders) > 1  # the shards' order is shuffled
    # fpipe's own API keeps its default: single samples shuffled
    own = _numbers(fpipe.get_train_dataset(data, batch_size=2, seed=5), 20)
    assert max(len(r) for r in _runs(own)) < PER_SHARD


def test_a_limit_cuts_each_shard_as_energon_does(data):
    # 5 samples > 1.5 * 2: round(5 / 2) = 2 slices, starting at int(0 * 2.5), int(1 * 2.5)
    numbers = _numbers(_train(data, max_samples_per_sequence=2), 20)
    slices = {tuple(r) for r in (range(s, s + 2) for s in range(0, 20, 5))}
    slices |= {tuple(r) for r in (range(s + 2, s + 5) for s in range(0, 20, 5))}
    i, seen = 0, set()
    while i < len(numbers):
        piece = next(s for s in slices if s[0] == numbers[i])
        assert tuple(numbers[i : i + len(piece)]) == piece
        seen.add(piece)
        i += len(piece)
    assert seen == slices
    # 5 <= 1.5 * 4: a shard stays whole
    numbers = _numbers(_train(data, max_samples_per_sequence=4), 20)
    assert all(len(r) % PER_SHARD == 0 for r in _runs(numbers))


def test_no_slice_crosses_a_workers_part(tmp_path):
    one = make_text_dataset(tmp_path / "one", shards=1, per_shard=10)
    wc = WorkerConfig(rank=0, world_size=1, num_workers=2)
    ds = _train(one, worker_config=wc, distribution="energon", max_samples_per_sequence=None)
    numbers = _numbers(ds, 10)
    assert numbers in ([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], [5, 6, 7, 8, 9, 0, 1, 2, 3, 4])
    assert {tuple(_numbers(_train(one, worker_config=wc, distribution="energon", seed=s,
                                  max_samples_per_sequence=None), 10)) for s in range(6)} == {
        (0, 1, 2, 3, 4, 5, 6, 7, 8, 9), (5, 6, 7, 8, 9, 0, 1, 2, 3, 4)}  # fmt: skip


def test_parallel_shard_iters_interleaves_whole_shards(data):
    numbers = _numbers(_train(data, max_samples_per_sequence=None, parallel_shard_iters=2), 20)
    assert sorted(numbers) == list(range(20))
    for s in range(0, 20, PER_SHARD):  # each shard still in order
        assert [x for x in numbers if s <= x < s + PER_SHARD] == list(range(s, s + PER_SHARD))
    assert max(len(r) for r in _runs(numbers)) < 2 * PER_SHARD
    assert any(len(r) < PER_SHARD for r in _runs(numbers))  # two shards at a time


def test_a_table_is_one_shard(tmp_path):
    path = tmp_path / "lines.jsonl"
    path.write_text("".join(json.dumps({"txt": f"t{i}"}) + "\n" for i in range(9)))
    ds = _train(path, batch_size=1, max_samples_per_sequence=None, sample_type="TextSample",
                field_map={"text": "txt"})  # fmt: skip
    with fpipe.get_loader(ds) as loader:
        texts = [b.text[0] for _, b in zip(range(9), loader)]
    assert texts == [f"t{i}" for i in range(9)]


@pytest.mark.parametrize(
    "kw",
    [
        dict(max_samples_per_sequence=None, shuffle_buffer_size=4),
        dict(max_samples_per_sequence=3, parallel_shard_iters=2),
    ],
)
def test_exact_resume_and_any_number_of_workers(data, kw):
    whole = _numbers(_train(data, **kw), 50)
    assert _numbers(_train(data, **kw), 50, num_workers=2) == whole
    ds = _train(data, **kw)
    with fpipe.get_loader(ds, num_workers=0) as loader:
        it = iter(loader)
        head = [int(k.rsplit("/", 1)[-1]) for _ in range(7) for k in batch_keys(next(it))]
        state = loader.state_dict()
    again = fpipe.get_loader(_train(data, **kw), num_workers=1)
    again.load_state_dict(state)
    with again:
        rest = []
        for batch in again:
            rest.extend(int(k.rsplit("/", 1)[-1]) for k in batch_keys(batch))
            if len(head) + len(rest) >= 50:
                break
    assert head + rest[: 50 - len(head)] == whole


def test_a_join_is_sliced_by_its_workers_parts_only(tmp_path):
    # Energon's joined dataset slices its workers' ranges only (Sharder.slice_workers): with no
    # limit, the joined samples come in index order, whatever the primary's shards.
    from tests.loader.test_join import ImageText
    from tests.storage.helpers import jpeg_bytes, write_tar

    for s in range(3):
        keys = range(4 * s, 4 * s + 4)
        write_tar(tmp_path / "images" / f"img-{s}.tar",
                  [(f"{k:06d}", {"jpg": jpeg_bytes(8, 8)}) for k in keys])  # fmt: skip
    write_tar(tmp_path / "texts" / "txt-0.tar",
              [(f"{k:06d}", {"txt": f"t{k}".encode()}) for k in range(12)])  # fmt: skip
    fpipe.storage.prepare_dataset(tmp_path / "images", fields={"image": "jpg"},
                                  sample_type="ImageSample")  # fmt: skip
    fpipe.storage.prepare_dataset(tmp_path / "texts", fields={"text": "txt"},
                                  sample_type="TextSample")  # fmt: skip
    path = tmp_path / "joined.yaml"
    path.write_text(
        "splits:\n  train:\n    join:\n      - {path: ./images}\n      - {path: ./texts}\n"
        f"    joiner: {{__module__: tests.loader.test_join, __class__: {ImageText.__name__}}}\n"
    )
    for seed in range(3):
        ds = _train(path, batch_size=1, max_samples_per_sequence=None, seed=seed)
        with fpipe.get_loader(ds) as loader:
            texts = [b.text[0] for _, b in zip(range(12), loader)]
        assert texts == [f"t{k}" for k in range(12)]


def test_multiplier_minus_one_draws_slices_with_replacement_forever(data):
    # Energon's shuffle_over_epochs_multiplier=-1: after each slice, the next is drawn
    # uniformly from all slices (with replacement), forever, even with repeat=False
    kw = dict(max_samples_per_sequence=None, shuffle_over_epochs_multiplier=-1, repeat=False)
    numbers = _numbers(_train(data, **kw), 200)
    assert len(numbers) == 200  # endless
    runs = [numbers[i : i + PER_SHARD] for i in range(0, 200, PER_SHARD)]
    for run in runs:  # each drawn slice (a whole shard) read in order
        assert run == list(range(run[0], run[0] + PER_SHARD)) and run[0] % PER_SHARD == 0
    shards = [run[0] // PER_SHARD for run in runs]
    assert set(shards) == {0, 1, 2, 3}
    # with replacement: some shard comes again before every shard has come once
    assert any(len(set(shards[i : i + 4])) < 4 for i in range(0, 40, 4))
    # the same stream for any number of workers, and resumed exactly
    assert _numbers(_train(data, **kw), 60, num_workers=2) == numbers[:60]
    loader = fpipe.get_loader(_train(data, **kw), num_workers=0)
    it = iter(loader)
    for _ in range(7):
        next(it)
    state = loader.state_dict()
    rest = [int(k.rsplit("/", 1)[-1]) for _ in range(10) for k in batch_keys(next(it))]
    again = fpipe.get_loader(_train(data, **kw), num_workers=0)
    again.load_state_dict(state)
    it2 = iter(again)
    assert [int(k.rsplit("/", 1)[-1]) for _ in range(10) for k in batch_keys(next(it2))] == rest
    assert rest == numbers[14:34]
    with pytest.raises(ConfigError, match="num_epochs=2 with shuffle_over_epochs"):
        _train(data, **{**kw, "num_epochs": 2})
