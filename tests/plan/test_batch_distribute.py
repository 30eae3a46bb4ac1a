import numpy as np
import pytest

from fpipe.core import ConfigError, Pipeline, Refs, chain
from fpipe.core.testing import check_pipeline, check_stage, run
from fpipe.plan import batch, distribute, in_memory, map_refs, repeat, samples, window_shuffle

REFS = Refs.of(index=np.arange(23))


def _source():
    return repeat(in_memory(REFS), 1)


def test_batch_contract_and_remainder():
    check_stage(lambda: batch(4), _source, cut_points=[0, 1, 5])
    state, out = run(Pipeline(chain(repeat(in_memory(REFS), 1), batch(4)), 0))
    assert [len(r) for r in out] == [4] * 5 and state.st.dropped == 3
    assert [r.step for r in out] == list(range(5))
    _, out = run(Pipeline(chain(repeat(in_memory(REFS), 1), batch(4, drop_last=False)), 0))
    assert [len(r) for r in out] == [4] * 5 + [3]


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_distribute_global_mode_covers_each_epoch(world):
    n, b = 50, 3
    seen = []
    for rank in range(world):
        p = Pipeline(
            chain(
                repeat(samples(n), 2),
                window_shuffle(11),
                distribute(b * world, rank=rank, world_size=world, drop_last=False),
                batch(b, drop_last=False),
            ),
            9,
        )
        _, out = run(p)
        seen += [t for r in out for t in r.refs.triples()]
    for epoch in (0, 1):
        assert sorted(i for _, i, e in seen if e == epoch) == list(range(n))


def test_distribute_contract():
    check_stage(lambda: distribute(6, rank=1, world_size=3), _source, cut_points=[0, 2, 7])


def test_distribute_config_errors():
    with pytest.raises(ConfigError, match="multiple of the world size"):
        distribute(10, rank=0, world_size=3)
    with pytest.raises(ConfigError, match="rank"):
        distribute(4, rank=2, world_size=2)


def test_map_refs():
    def add_one(r):
        return r.with_columns(index=r.index + 1)

    check_stage(lambda: map_refs(add_one, name="add_one"), _source, cut_points=[0, 4])
    with pytest.raises(ConfigError, match="name"):
        map_refs(lambda r: r)


def test_six_stage_contract():
    from tests.helpers import six_stage

    check_pipeline(
        lambda: six_stage(
            num_samples=2000, window=64, batch_size=8, world_size=2, rank=1, num_epochs=2
        ),
        cut_points=[0, 1, 37, 100],
    )


def test_per_rank_refusal_says_why_and_how_to_switch():
    from fpipe.core import SnapshotMismatchError
    from fpipe.plan import per_rank

    def make(world):
        return Pipeline(chain(repeat(per_rank(samples(20), rank=0, world_size=world)), batch(2)), 1)

    with pytest.raises(SnapshotMismatchError, match=r"world_size(.|\n)*distribution='global'"):
        make(3).restore(make(2).snapshot(make(2).init()))
