"""``len()`` of blends as Energon counts it (Energon 7.4 test_metadataset_v2: a weighted blend is
one pass over each dataset, whatever an entry's ``shuffle_over_epochs_multiplier``; a
``blend_epochized`` with ``repeat=False`` is each dataset times its repetitions)."""

from __future__ import annotations

import textwrap

import pytest

from fpipe.energon import WorkerConfig, get_loader, get_train_dataset
from tests.distributed.helpers import make_text_dataset

WC = WorkerConfig(rank=0, world_size=1, num_workers=0)
PLAIN = dict(worker_config=WC, shuffle_buffer_size=None, max_samples_per_sequence=None)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("blendlen")
    make_text_dataset(root / "ds1", shards=2, per_shard=10)  # 20
    make_text_dataset(root / "ds2", shards=2, per_shard=5)  # 10
    return root


def _yaml(root, name, body):
    path = root / name
    path.write_text("__module__: megatron.energon\n__class__: MetadatasetV2\n" + body)
    return path


def test_an_entrys_multiplier_leaves_the_length_at_one_pass(root):
    body = textwrap.dedent(
        """\
        splits:
          train:
            blend:
              - {weight: 1, path: ds1, shuffle_over_epochs_multiplier: 3}
              - {weight: 1, path: ds2}
        """
    )
    ds = get_train_dataset(_yaml(root, "mult.yaml", body), batch_size=5, **PLAIN)
    assert len(ds) == (20 + 10) // 5
    # the global multiplier: one pass too
    one = get_train_dataset(root / "ds1", batch_size=5, shuffle_over_epochs_multiplier=3, **PLAIN)
    assert len(one) == 20 // 5


def test_blend_epochized_without_repeat_has_a_length(root):
    body = textwrap.dedent(
        """\
        splits:
          train:
            blend_epochized:
              - {repetitions: 2, path: ds1}
              - {repetitions: 3, path: ds2}
        """
    )
    ds = get_train_dataset(_yaml(root, "epo.yaml", body), batch_size=1, repeat=False, **PLAIN)
    assert len(ds) == 2 * 20 + 3 * 10
    assert len(list(get_loader(ds))) == len(ds)


def test_fractional_repetitions_round_down_per_worker_on_several_ranks(tmp_path):
    """Energon's ``RepeatDataset`` counts each worker's part: 55 samples on 2 ranks of 2
    workers are parts of 14, 14 | 14, 13 (and 14, 13 | 14, 14 for the second dataset, shifted
    by the first's 55); repetitions 0.7 and 1.5 give rank 0 ``9 + 9 + 21 + 19 = 58`` samples
    and rank 1 ``9 + 9 + 21 + 21 = 60`` (Energon's test_metadataset_fixed_fractional_epochs),
    where rounding each rank's 27 or 28 samples once gives 60 on both."""
    make_text_dataset(tmp_path / "ds1", shards=11, per_shard=5)
    make_text_dataset(tmp_path / "ds2", shards=11, per_shard=5)
    body = textwrap.dedent(
        """\
        splits:
          train:
            blend_epochized:
              - {repetitions: 0.7, path: ds1}
              - {repetitions: 1.5, path: ds2}
        """
    )
    path = _yaml(tmp_path, "frac.yaml", body)
    got = []
    for rank in (0, 1):
        wc = WorkerConfig(rank=rank, world_size=2, num_workers=2)
        ds = get_train_dataset(
            path, batch_size=1, repeat=False, worker_config=wc, shuffle_buffer_size=None,
            max_samples_per_sequence=None, shuffle_over_epochs_multiplier=None,
        )  # fmt: skip
        with get_loader(ds) as loader:
            got.append((len(ds), sum(1 for _ in loader)))
    assert got == [(58, 58), (60, 60)]
    one = get_train_dataset(path, batch_size=1, repeat=False, **PLAIN)  # one rank: 38 + 82
    assert len(one) == 120
