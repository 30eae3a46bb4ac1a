"""Pipelines shared by tests and benchmarks."""

import numpy as np

from fpipe.core import Pipeline, chain
from fpipe.plan import (
    batch,
    distribute,
    filter_refs,
    repeat,
    samples,
    slice_shuffle,
    window_shuffle,
)


def six_stage(
    num_samples=100_000,
    window=10_000,
    batch_size=32,
    world_size=1,
    rank=0,
    seed=1,
    slice_size=100,
    num_epochs=None,
):
    """The issue's 6-stage plan: slice shuffle, repeat, window shuffle, filter, distribute,
    batch."""
    tokens = (np.arange(num_samples) * 7919) % 1000
    view = slice_shuffle(samples(num_samples, columns={"tokens": tokens}), slice_size)
    src = chain(
        repeat(view, num_epochs),
        window_shuffle(window),
        filter_refs("tokens", "<", 900),
        distribute(batch_size * world_size, rank=rank, world_size=world_size),
        batch(batch_size),
    )
    return Pipeline(src, seed=seed)


def fast_forward(p: Pipeline, steps: int):
    """The state after ``steps`` batches of the six-stage plan, without pulling batch by batch.

    The inner stream (repeat -> window shuffle -> filter) is pulled in large chunks, then the
    distribute and batch states are put at that global-batch boundary. test_fast_forward_matches
    checks that this equals the state of the real run.
    """
    from fpipe.core import Lifted
    from fpipe.plan import BatchState, DistributeState

    state = p.init()
    inner = state.up.up  # the stream under distribute (filter's lifted state)
    gbs = dict(p.parts)["distribute"].global_batch_size
    inner_next = p.source.inputs[0].inputs[0].next
    need, epoch = steps * gbs, 0
    while need:
        inner, chunk = inner_next(inner, min(need, 1 << 20))
        assert len(chunk), "stream ended"
        need -= len(chunk)
        epoch = max(epoch, int(chunk.epoch.max()))
    bs = p.get(state, "batch")
    dist = DistributeState(p.get(state, "distribute").dropped, epoch, steps * gbs)
    return Lifted(Lifted(inner, dist, 0), BatchState(bs.key, steps, bs.dropped), 0)


# The bucket_config of docs/buckets.md (fpipe's form, not OpenSora's resolution-name form):
# aspect ratio -> resolution (int side or "HxW") -> frames -> (probability, batch size).
OPENSORA_BUCKET_CONFIG = {
    "1:1": {
        256: {1: (1.0, 64), 17: (1.0, 16), 65: (0.5, 4)},
        512: {1: (1.0, 16), 17: (1.0, 4), 65: (0.25, 1)},
    },
    "16:9": {
        "240x426": {17: (1.0, 8), 65: (0.5, 2)},
        "480x854": {17: (0.5, 2), 65: (0.25, 1)},
    },
    "9:16": {"426x240": {17: (1.0, 8)}},
}

# The same config in YAML (lists for tuples; aspect ratios quoted, see docs/buckets.md).
OPENSORA_BUCKET_YAML = """
"1:1":
  256: {1: [1.0, 64], 17: [1.0, 16], 65: [0.5, 4]}
  512: {1: [1.0, 16], 17: [1.0, 4], 65: [0.25, 1]}
"16:9":
  240x426: {17: [1.0, 8], 65: [0.5, 2]}
  480x854: {17: [0.5, 2], 65: [0.25, 1]}
"9:16":
  426x240: {17: [1.0, 8]}
"""


def check_token_column_use(root, short_lengths):
    """A prepared ``ntok`` column drives a plan: packs of ``root/short`` within a 16-token
    budget, and a 1:1 token blend of ``root/short`` and ``root/long`` (whose lengths differ)
    gives each half of the tokens, the short one most of the samples. ``short_lengths``: the
    column's expected values for ``root/short``, by sample index."""
    import fpipe
    from fpipe.core.testing import run
    from fpipe.loader import Topology
    from fpipe.plan import pack

    args = dict(
        batch_size=4,
        seed=3,
        sample_type="TextSample",
        field_map={"text": "text"},
        shuffle_buffer_size=20,
        columns=["ntok"],
        topology=Topology(rank=0, world_size=1),
    )
    packed = fpipe.get_train_dataset(
        str(root / "short"),
        **args,
        plan_stages=[pack({"ntok": 16}, strategy="ffd", packing_buffer_size=40)],
    )
    _, recipes = run(packed.plan, limit=10)
    for r in recipes:
        ntok = r.refs.column("ntok")
        assert ntok.tolist() == short_lengths[r.refs.index].tolist()  # the rows' lengths
        loads = np.bincount(r.refs.column("pack"), weights=ntok)
        assert loads.max() <= 16 and len(loads) == 4  # 4 packs a batch, each within budget
    (root / "mix.yaml").write_text(
        "splits:\n  train:\n    blend_unit: ntok\n    blend:\n"
        "      - {weight: 1, path: short}\n      - {weight: 1, path: long}\n"
    )
    mixed = fpipe.get_train_dataset(str(root / "mix.yaml"), **args)
    _, recipes = run(mixed.plan, limit=100)
    ntok = np.concatenate([r.refs.column("ntok") for r in recipes])
    mine = np.concatenate([r.refs.dataset for r in recipes]) == 0
    assert abs(ntok[mine].sum() / ntok.sum() - 0.5) < 0.03  # shares of tokens, not samples
    assert mine.mean() > 0.8  # the short dataset gives most samples
