"""``subset:`` in a metadataset (Energon 7.2's sample ranges, ``docs/source/advanced/subsets.md``
and the subset tests of its ``tests/test_metadataset_v2.py``): percentages at any level,
composed from the outside in; sample indices (``end``: the split's end) on a leaf dataset only;
a leaf's index range applied before the percentages, each bound rounded down."""

from __future__ import annotations

import json
import textwrap
from collections import Counter

import pytest
import yaml

from fpipe.core.errors import ConfigError
from fpipe.energon import WorkerConfig, get_loader, get_train_dataset
from tests.energon.energon_folder import TEXT_CONFIG as TEXT
from tests.storage.helpers import write_tar, write_tar_idx


def _text_folder(root, offset, n=55, per_shard=10):
    """An Energon folder of ``n`` text samples whose text is ``offset + i``."""
    names = []
    for s, start in enumerate(range(0, n, per_shard)):
        name = f"parts/data-{s}.tar"
        keys = range(start, min(start + per_shard, n))
        write_tar(root / name, [(f"{i:06d}", {"txt": f"{offset + i}".encode()}) for i in keys])
        write_tar_idx(root / name)
        names.append(name)
    meta = root / ".nv-meta"
    meta.mkdir(parents=True)
    counts = {name: min(per_shard, n - s * per_shard) for s, name in enumerate(names)}
    (meta / ".info.json").write_text(json.dumps({"shard_counts": counts}))
    split = {"split_parts": {"train": names, "val": [], "test": []}, "exclude": []}
    (meta / "split.yaml").write_text(yaml.dump(split))
    (meta / "dataset.yaml").write_text(yaml.dump(TEXT))


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("subset")
    for name, offset in (("ds1", 0), ("ds2", 100), ("ds3", 200)):
        _text_folder(root / name, offset)
    return root


def _write(root, name, body):
    (root / name).write_text(textwrap.dedent(body))
    return root / name


def _numbers(path):
    ds = get_train_dataset(
        path,
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0, seed_offset=42),
        batch_size=1,
        shuffle_buffer_size=None,
        shuffle_over_epochs_multiplier=None,
        parallel_shard_iters=1,
        max_samples_per_sequence=None,
        repeat=False,
    )
    return [int(batch.text[0]) for batch in get_loader(ds)]


def test_an_index_range_to_the_end(root):
    path = _write(
        root,
        "end.yaml",
        """\
        splits:
          train:
            subset: {range: [50, end]}
            path: ds1
        """,
    )
    assert _numbers(path) == [50, 51, 52, 53, 54]


RATIO2 = """\
    splits:
      train:
        subset: {range: [20%, 80%]}
        blend_epochized:
          - path: ds1
            subset: {range: [10, 30]}
          - repetitions: 2
            subset: {range: [20, 40]}
            path: ds2
    """


def test_percentages_on_a_blend_apply_to_each_dataset(root):
    path = _write(
        root,
        "ratio.yaml",
        """\
        splits:
          train:
            subset: {range: [20%, 80%]}
            blend_epochized:
              - path: ds1
              - repetitions: 2
                path: ds2
        """,
    )
    counts = Counter(_numbers(path))  # [0.2 * 55, 0.8 * 55) = [11, 44) of each
    assert counts == Counter(
        {**dict.fromkeys(range(11, 44), 1), **dict.fromkeys(range(111, 144), 2)}
    )
    counts = Counter(_numbers(_write(root, "ratio2.yaml", RATIO2)))  # [10, 30) then 20%..80%
    assert counts == Counter(
        {**dict.fromkeys(range(14, 26), 1), **dict.fromkeys(range(124, 136), 2)}
    )


def test_nested_subsets_compose_from_the_outside_in(root):
    _write(root, "ratio2.yaml", RATIO2)
    path = _write(
        root,
        "nested.yaml",
        """\
        splits:
          train:
            subset: {range: [0%, 50%]}
            blend_epochized:
              - path: ds3
                subset: {range: [30, 50]}
              - repetitions: 2
                subset: {range: [25%, 75%]}
                path: ratio2.yaml
        """,
    )
    counts = Counter(_numbers(path))
    want = {
        **dict.fromkeys(range(230, 240), 1),  # [30, 50), first half
        **dict.fromkeys(range(17, 20), 2),  # [10, 30): 20..80% of 25..75% of 0..50%
        **dict.fromkeys(range(127, 130), 4),
    }
    assert counts == Counter(want)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (
            "splits: {train: {subset: {range: [50, 55]}, blend_epochized: [{path: ds1}]}}",
            "only allowed for a leaf dataset",
        ),
        (
            "splits: {train: {subset: {range: [0, 10]}, path: ratio2.yaml}}",
            "only allowed for a leaf dataset",
        ),
        ("splits: {train: {subset: {range: [0%, 101%]}, path: ds1}}", "between 0% and 100%"),
        ("splits: {train: {subset: {range: [10, 5%]}, path: ds1}}", "ends at one"),
        ("splits: {train: {subset: {range: [60%, 50%]}, path: ds1}}", "starts after it ends"),
        ("splits: {train: {subset: [0, 5], path: ds1}}", "expected {range"),
        ("splits: {train: {subset: {range: [0, 56]}, path: ds1}}", "ends after the split's 55"),
    ],
)
def test_bad_subsets_are_refused_naming_the_file(root, body, match):
    _write(root, "ratio2.yaml", RATIO2)
    path = _write(root, "bad.yaml", body + "\n")
    with pytest.raises(ConfigError, match=match) as e:
        _numbers(path)
    assert "bad.yaml" in str(e.value)


def test_a_state_restores_only_into_the_same_subset(root):
    def loader(rng):
        path = _write(
            root, "st.yaml", f"splits: {{train: {{subset: {{range: {rng}}}, path: ds1}}}}\n"
        )
        return get_loader(get_train_dataset(path, batch_size=2, shuffle_buffer_size=None))

    first = loader("[0%, 50%]")
    it = iter(first)
    next(it)
    state = first.save_state_rank()
    rest = [tuple(b.text) for _, b in zip(range(3), it)]
    again = loader("[0%, 50%]")
    again.restore_state_rank(state)
    assert [tuple(b.text) for _, b in zip(range(3), again)] == rest
    with pytest.raises(Exception, match=r"source_id.*ds1#train#55\[0:33\]"):
        loader("[0%, 60%]").restore_state_rank(state)


def test_fpipe_info_counts_the_kept_samples(root, capsys):
    from fpipe.cli.main import main

    path = _write(root, "info.yaml", "splits: {train: {subset: {range: [10, 30]}, path: ds1}}\n")
    assert main(["info", str(path)]) == 0
    assert "20 samples ([10:30] of train of" in capsys.readouterr().out
