import numpy as np
import pytest

from fpipe.core import ConfigError, Pipeline, Refs, SnapshotMismatchError, chain, stateless
from fpipe.core.records import Config
from fpipe.core.testing import outputs_equal, run
from fpipe.plan import batch, filter_refs, map_refs, repeat, samples, window_shuffle


class _C(Config, frozen=True):
    pass


def _plus(k):
    def fn(r):
        return r.with_columns(index=r.index + k)

    fn.__qualname__ = f"plus{k}"
    return stateless(f"plus{k}", _C(), fn)


def test_chain_of_stages_equals_threading_by_hand():
    a, b, f = _plus(1), _plus(10), filter_refs("index", ">", 12)
    c = chain(a, b, f)
    x = Refs.of(index=np.arange(5))
    st = c.init(0)
    st2, out = c.step(st, x)
    _, y = a.step(a.init(0), x)
    _, y = b.step(b.init(0), y)
    fs, y = f.step(f.init(0), y)
    assert out == y and st2[2] == fs


def test_chain_is_associative():
    def make(grouped):
        src = repeat(samples(30), 2)
        if grouped:
            return Pipeline(
                chain(chain(src, window_shuffle(4)), chain(_plus(1), _plus(2)), batch(3)), 5
            )
        return Pipeline(chain(src, window_shuffle(4), _plus(1), _plus(2), batch(3)), 5)

    assert outputs_equal(run(make(True))[1], run(make(False))[1])


def test_duplicate_names_refused():
    with pytest.raises(ConfigError, match="named 'window_shuffle'"):
        chain(repeat(samples(3)), window_shuffle(2), window_shuffle(3))
    chain(repeat(samples(3)), window_shuffle(2), window_shuffle(3, name="shuffle2"))


def test_block_stage_needs_a_source():
    with pytest.raises(ConfigError, match="chain\\(source"):
        chain(window_shuffle(2), _plus(1))


def test_end_of_stream_is_stable():
    p = Pipeline(
        chain(
            repeat(samples(5), 1),
            window_shuffle(2),
            batch(2, drop_last=False),
        ),
        0,
    )
    state, out = run(p)
    assert len(out) == 3
    state2, more = p.next(state)
    assert len(more) == 0 and state2 == state


def test_map_refs_changing_length_is_an_error():
    def drop(r):
        return r[:1]

    with pytest.raises(ConfigError, match="filter_refs"):
        p = Pipeline(chain(repeat(samples(5), 1), map_refs(drop, name="drop")), 0)
        p.next(p.init(), 5)


def _token_plan(limit, grouped):
    src = repeat(samples(20, columns={"t": np.arange(20)}), 1)
    if grouped:  # the filter sits inside a sub-chain of bare stages
        return Pipeline(chain(src, chain(filter_refs("t", "<", limit), _plus(1)), batch(2)), 0)
    return Pipeline(chain(src, filter_refs("t", "<", limit), _plus(1), batch(2)), 0)


def test_sub_chain_fingerprints_every_members_config():
    """A sub-chain of bare stages used to fingerprint only its members' names, so pipelines
    differing in a filter's value had equal fingerprints and restored each other's snapshots."""
    a, b = _token_plan(9, True), _token_plan(5, True)
    assert a.fingerprint != b.fingerprint
    data = a.snapshot(run(a, limit=2)[0])
    with pytest.raises(SnapshotMismatchError, match=r"'filter'.*'value'"):
        b.restore(data)


def test_sub_chain_is_spliced_into_one_flat_plan():
    grouped, flat = _token_plan(9, True), _token_plan(9, False)
    assert grouped.parts == flat.parts and grouped.describe() == flat.describe()
    assert [d["name"] for d in flat.describe()] == [
        "pipeline", "samples", "repeat", "filter", "plus1", "batch"
    ]  # fmt: skip
    s1, out1 = run(grouped)
    s2, out2 = run(flat)
    assert outputs_equal(out1, out2) and grouped.snapshot(s1) == flat.snapshot(s2)
    assert grouped.get(s1, "filter").dropped == 11
