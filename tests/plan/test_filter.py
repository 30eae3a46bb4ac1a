import numpy as np
import pytest

from fpipe.core import ConfigError, Pipeline, Refs, chain
from fpipe.core.testing import check_stage, run
from fpipe.plan import filter_refs, in_memory, repeat

REFS = Refs.of(index=np.arange(40), tokens=(np.arange(40) * 13) % 17)


def _source():
    return repeat(in_memory(REFS), 1)


def test_contract():
    check_stage(lambda: filter_refs("tokens", "<", 9), _source, cut_points=[0, 3, 20])


def test_counts_dropped():
    p = Pipeline(chain(repeat(in_memory(REFS), 1), filter_refs("tokens", ">=", 9)), seed=0)
    state, out = run(p)
    assert len(out) + state.st.dropped == len(REFS)
    assert all(r.column("tokens")[0] >= 9 for r in out)


def even(refs):
    return refs.index % 2 == 0


def test_ops_and_functions():
    s = filter_refs(even)
    assert s.step(s.init(0), REFS)[1].index.tolist() == list(range(0, 40, 2))
    s = filter_refs("index", "in", [3, 5])
    assert s.step(s.init(0), REFS)[1].index.tolist() == [3, 5]
    with pytest.raises(ConfigError, match="name="):
        filter_refs(lambda r: r.index > 0)
    with pytest.raises(ConfigError, match="op"):
        filter_refs("tokens", "~", 1)
