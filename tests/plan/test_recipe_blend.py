"""``blend_recipes``: blends and concatenations of whole planned datasets, as documented
(docs/design/blend.md, "Blends of whole datasets"; docs/metadataset.md):

* output ``t`` of a weighted blend draws ``u = uniform(fold_in(step_key(root, name), 0xB7E4D),
  t)`` and takes the first input whose running sum of weights exceeds ``u * total`` (ended
  inputs weigh 0); a picked input with no recipe left is marked ended and ``t`` is drawn again
  with the same ``u``; a concatenation takes the first input that has not ended; the blend
  ends when every input has;
* input ``d`` gives exactly the recipes its plan gives alone (root ``key(seed_d)``), in order;
  each output is restamped with ``step = t`` and its ``part`` offset by the inputs before;
* the state is the position, one ``ended`` flag and one counter per input, and each input's
  own state: it restores exactly, and edited states are refused;
* bad arguments are refused with a ConfigError that says what is wrong.
"""

import numpy as np
import pytest

from fpipe.core import ConfigError, Pipeline, chain
from fpipe.core.errors import SnapshotError
from fpipe.core.graph import step_key
from fpipe.core.rng import fold_in, key, uniform
from fpipe.plan import batch, distribute, repeat, samples, window_shuffle
from fpipe.plan.recipe_blend import blend_recipes


def plan(size, batch_size, epochs=1, dataset=0):
    return chain(repeat(samples(size, dataset=dataset), epochs), batch(batch_size))


def pull(p, state, want):
    """Up to ``want`` outputs of ``p`` from ``state`` (next may give fewer per call)."""
    out: list = []
    while len(out) < want:
        state, got = p.next(state, want - len(out))
        if not len(got):
            break
        out += got
    return state, out


def alone(source, seed, want=1000):
    """The recipes ``source`` gives on its own with ``seed``."""
    p = Pipeline(source, seed=seed)
    return pull(p, p.init(), want)[1]


def ids(recipe):
    return recipe.refs.index.tolist()


def reference_inputs(weights, lengths, root_seed, name="blend_batches"):
    """The input of each output, one at a time from the documented rule."""
    ck = fold_in(step_key(key(root_seed), name), 0xB7E4D)
    left, ended, out, t = list(lengths), [False] * len(lengths), [], 0
    while not all(ended):
        u = uniform(ck, t)
        live = [0.0 if e else float(w) for e, w in zip(ended, weights)]
        total, running, d = sum(live), 0.0, None
        for i, w in enumerate(live):
            running += w
            if running > u * total:
                d = i
                break
        if d is None or live[d] == 0:  # rounding: the last input that weighs anything
            d = max(i for i, w in enumerate(live) if w > 0)
        if left[d] == 0:
            ended[d] = True
            continue
        left[d] -= 1
        out.append(d)
        t += 1
    return out


def run_blend(sources, seeds, want=1000, **kw):
    src = blend_recipes(sources, seeds=seeds, **kw)
    p = Pipeline(src, seed=seeds[0])
    state, out = pull(p, p.init(), want)
    return p, state, out


# -- which input gives each output ----------------------------------------------------------


@pytest.mark.parametrize(
    "weights, sizes",
    [
        ((1.0, 1.0), (8, 12)),
        ((3.0, 1.0), (20, 6)),
        ((1.0, 2.0, 5.0), (6, 10, 16)),
        ((0.5, 0.25), (4, 30)),
    ],
)
@pytest.mark.parametrize("seed", [0, 7])
def test_each_output_comes_from_the_input_the_documented_draw_picks(weights, sizes, seed):
    sources = [plan(s, 2, dataset=d) for d, s in enumerate(sizes)]
    seeds = [seed, seed + 11, seed + 5][: len(sizes)]
    _, _, out = run_blend(sources, seeds, weights=weights)
    lengths = [len(alone(s, sd)) for s, sd in zip(sources, seeds)]
    assert [r.part for r in out] == reference_inputs(weights, lengths, seeds[0])


def test_the_root_key_is_the_first_inputs_seed():
    sources = [plan(40, 1, dataset=0), plan(40, 1, dataset=1)]
    _, _, out = run_blend(sources, [3, 4], weights=[1, 1])
    assert [r.part for r in out] == reference_inputs([1, 1], [40, 40], 3)
    assert [r.part for r in out] != reference_inputs([1, 1], [40, 40], 4)


def test_a_blend_named_otherwise_draws_from_its_own_name():
    sources = [plan(40, 1, dataset=0), plan(40, 1, dataset=1)]
    _, _, out = run_blend(sources, [3, 4], weights=[1, 1], name="other")
    assert [r.part for r in out] == reference_inputs([1, 1], [40, 40], 3, name="other")


def test_a_heavier_input_gives_its_share_of_the_outputs():
    sources = [plan(10, 1, epochs=None, dataset=d) for d in range(3)]
    _, _, out = run_blend(sources, [1, 2, 3], want=3000, weights=[1, 2, 7])
    shares = np.bincount([r.part for r in out], minlength=3) / 3000
    sd = np.sqrt(0.7 * 0.3 / 3000)
    assert np.allclose(shares, [0.1, 0.2, 0.7], atol=5 * sd)


def test_an_input_that_ends_leaves_the_draw_and_the_blend_ends_with_the_last():
    sources = [plan(4, 2), plan(40, 2, dataset=1)]  # input 0: 2 recipes, input 1: 20
    p, state, out = run_blend(sources, [0, 1], weights=[100, 1])
    assert [r.part for r in out] == reference_inputs([100, 1], [2, 20], 0)
    assert [r.part for r in out].count(0) == 2 and len(out) == 22
    assert state.ended == (True, True) and state.taken == (2, 20) and state.position == 22
    again, more = p.next(state, 5)
    assert len(more) == 0 and again.position == 22


def test_a_repeating_input_never_ends_the_blend():
    sources = [plan(4, 2), plan(6, 3, epochs=None, dataset=1)]
    _, state, out = run_blend(sources, [0, 1], want=50, weights=[1, 1])
    assert len(out) == 50 and state.ended == (True, False)
    assert [r.part for r in out].count(0) == 2


# -- what each output is --------------------------------------------------------------------


def test_each_input_gives_the_recipes_it_gives_alone_restamped_with_the_blend_step():
    sources = [plan(10, 2, epochs=2), plan(9, 3, epochs=2, dataset=1)]
    seeds = [5, 6]
    _, _, out = run_blend(sources, seeds, weights=[2, 3])
    for d in range(2):
        own = alone(sources[d], seeds[d])
        got = [r for r in out if r.part == d]
        assert [ids(r) for r in got] == [ids(r) for r in own]
        assert [r.key for r in got] == [r.key for r in own]
    assert [r.step for r in out] == list(range(len(out)))


def test_parts_are_offset_by_the_part_numbers_of_the_inputs_before():
    sources = [plan(6, 2, dataset=d) for d in range(3)]
    _, _, out = run_blend(sources, [1, 2, 3], weights=[1, 1, 1], parts=[2, 3, 1])
    assert sorted({r.part for r in out}) == [0, 2, 5]
    by_part = {p: sum(r.part == p for r in out) for p in (0, 2, 5)}
    assert by_part == {0: 3, 2: 3, 5: 3}


def test_an_inputs_own_part_is_kept_under_the_offset():
    inner = blend_recipes([plan(4, 2), plan(4, 2, dataset=1)], seeds=[1, 2], weights=[1, 1])
    outer = [plan(4, 2, dataset=2), inner]
    _, _, out = run_blend(outer, [3, 1], weights=[1, 1], parts=[1, 2])
    inner_parts = [r.part for r in alone(inner, 1)]
    assert [r.part - 1 for r in out if r.part >= 1] == inner_parts
    assert sorted(r.part for r in out) == [0, 0, 1, 1, 2, 2]


def test_concat_gives_every_recipe_of_each_input_in_turn():
    sources = [plan(6, 2), plan(4, 1, dataset=1), plan(3, 3, dataset=2)]
    seeds = [1, 2, 3]
    _, state, out = run_blend(sources, seeds, mode="concat", name="concat_batches")
    assert [r.part for r in out] == [0, 0, 0, 1, 1, 1, 1, 2]
    assert [ids(r) for r in out] == [ids(r) for s, sd in zip(sources, seeds) for r in alone(s, sd)]
    assert [r.step for r in out] == list(range(8))
    assert state.ended == (True, True, True) and state.taken == (3, 4, 1)


def test_concat_with_parts_offsets_each_input():
    sources = [plan(2, 1), plan(2, 1, dataset=1)]
    _, _, out = run_blend(sources, [1, 2], mode="concat", parts=[3, 1])
    assert [r.part for r in out] == [0, 0, 3, 3]


# -- state: counters, resume, checks --------------------------------------------------------


def test_the_state_counts_position_and_recipes_per_input():
    sources = [plan(20, 2, dataset=0), plan(20, 2, dataset=1)]
    p, state, out = run_blend(sources, [0, 1], want=7, weights=[1, 3])
    parts = [r.part for r in out]
    assert state.position == 7 and p.next_step(state) == 7
    assert state.taken == (parts.count(0), parts.count(1))
    assert state.ended == (False, False)


@pytest.mark.parametrize("cut", [0, 1, 4, 9])
def test_a_snapshot_resumes_exactly(cut):
    sources = [plan(10, 2, epochs=2), plan(8, 1, epochs=2, dataset=1)]
    p, _, whole = run_blend(sources, [2, 3], weights=[1, 2])
    state, first = p.next(p.init(), cut)
    state = p.restore(p.snapshot(state))
    _, rest = p.next(state, 1000)
    assert [(r.step, r.part, ids(r)) for r in [*first, *rest]] == [
        (r.step, r.part, ids(r)) for r in whole
    ]


def test_next_in_small_chunks_gives_the_same_stream():
    sources = [plan(10, 2), plan(8, 1, dataset=1)]
    p, _, whole = run_blend(sources, [2, 3], weights=[1, 2])
    state, got = p.init(), []
    while True:
        state, out = p.next(state, 3)
        if not len(out):
            break
        got += out
    assert [(r.step, r.part, ids(r)) for r in got] == [(r.step, r.part, ids(r)) for r in whole]


def test_an_edited_state_is_refused():
    sources = [plan(10, 2), plan(8, 1, dataset=1)]
    p, state, _ = run_blend(sources, [2, 3], want=4, weights=[1, 2])
    src = p.source
    src.check(state)  # its own state passes
    bad_sum = state.__class__(state.key, state.position + 1, state.ended, state.taken, state.inputs)
    with pytest.raises(SnapshotError, match="not the sum"):
        src.check(bad_sum)
    for field in ("ended", "taken", "inputs"):
        value = getattr(state, field)[:1]
        fields = {f: getattr(state, f) for f in ("key", "position", "ended", "taken", "inputs")}
        fields[field] = value
        with pytest.raises(SnapshotError, match="counters for"):
            src.check(state.__class__(**fields))


def test_global_inputs_report_the_highest_epoch_and_the_refs_taken():
    def global_plan(size, dataset):
        return chain(repeat(samples(size, dataset=dataset), None), distribute(4), batch(4))

    sources = [global_plan(6, 0), global_plan(10, 1)]
    p, state, out = run_blend(sources, [1, 2], want=9, weights=[1, 1])
    parts = [r.part for r in out]
    refs = [4 * parts.count(0), 4 * parts.count(1)]
    epochs = [max(0, (r - 1) // size) for r, size in zip(refs, (6, 10))]
    assert p.position(state) == (max(epochs), sum(refs))


def test_a_plan_without_global_inputs_has_no_position():
    p, state, _ = run_blend([plan(6, 2), plan(6, 2, dataset=1)], [1, 2], want=3, weights=[1, 1])
    assert p.position(state) is None


def test_drawn_draws_each_inputs_lookahead():
    # a batch part way through its input block: drawn() is each input's own drawn state
    sources = [plan(10, 2), plan(10, 2, dataset=1)]
    p, state, _ = run_blend(sources, [1, 2], want=3, weights=[1, 1])
    drawn = p.source.drawn(state)
    expect = tuple(s.drawn(st) if s.drawn else st for s, st in zip(sources, state.inputs))
    assert drawn.inputs == expect
    assert (drawn.position, drawn.taken, drawn.ended) == (state.position, state.taken, state.ended)


# -- refused arguments ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"names": ["a", "a"]}, "unique name"),
        ({"names": ["a"]}, "unique name"),
        ({"seeds": [1]}, "1 seeds for 2 inputs"),
        ({"parts": [1, 0]}, "parts must be >= 1"),
        ({"parts": [1]}, "parts must be >= 1"),
        ({"weights": None}, "one weight per input"),
        ({"weights": [1.0]}, "one weight per input"),
        ({"weights": [1.0, 0.0]}, "finite and > 0"),
        ({"weights": [1.0, -1.0]}, "finite and > 0"),
        ({"weights": [1.0, float("inf")]}, "finite and > 0"),
        ({"weights": [1.0, float("nan")]}, "finite and > 0"),
        ({"mode": "mix"}, "mode must be"),
        ({"mode": "concat"}, "takes no weights"),
    ],
)
def test_bad_arguments_are_refused(kw, match):
    args = {"seeds": [1, 2], "weights": [1.0, 2.0], **kw}
    with pytest.raises(ConfigError, match=match):
        blend_recipes([plan(4, 2), plan(4, 2, dataset=1)], **args)


def test_no_inputs_is_refused():
    with pytest.raises(ConfigError, match="unique name"):
        blend_recipes([], seeds=[])


def test_the_config_names_inputs_seeds_weights_and_parts():
    src = blend_recipes(
        [plan(4, 2), plan(4, 2, dataset=1)], seeds=[1, 2], weights=[1, 3], parts=[2, 1]
    )
    c = src.config
    assert (c.datasets, c.seeds, c.mode, c.weights, c.parts) == (
        ("d0", "d1"),
        (1, 2),
        "weighted",
        (1.0, 3.0),
        (2, 1),
    )
    named = blend_recipes([plan(4, 2)], seeds=[1], mode="concat", names=["x"])
    c = named.config
    assert (c.datasets, c.mode, c.weights, c.parts) == (("x",), "concat", (), (1,))


# -- the inputs inside the blend ------------------------------------------------------------


def test_an_input_that_ended_keeps_the_state_its_end_reached():
    # batch(2) over 5 samples drops the last one when it runs out: a counter in its state
    sources = [plan(5, 2), plan(7, 3, dataset=1)]
    p, state, _ = run_blend(sources, [4, 9], weights=[1, 1])
    assert state.ended == (True, True)
    for d, (s, seed) in enumerate(zip(sources, [4, 9])):
        alone_p = Pipeline(s, seed=seed)
        end, _ = pull(alone_p, alone_p.init(), 1000)
        assert state.inputs[d] == end
    assert p.stats(state) == {
        "blend_batches/0/batch": {"batch_remainder": 1},
        "blend_batches/1/batch": {"batch_remainder": 1},
    }


def test_each_inputs_steps_are_found_by_path():
    sources = [plan(10, 2), plan(12, 3, dataset=1)]
    p, state, _ = run_blend(sources, [1, 2], want=5, weights=[1, 1])
    assert p.get(state, "blend_batches/0/batch") == state.inputs[0].st
    assert p.get(state, "blend_batches/1/repeat") == state.inputs[1].up
    names = [step["name"] for step in p.describe()]
    assert "blend_batches" in names


def test_the_fingerprint_covers_the_inputs_plans():
    a = blend_recipes([plan(10, 2), plan(12, 3, dataset=1)], seeds=[1, 2], weights=[1, 1])
    b = blend_recipes([plan(10, 2), plan(13, 3, dataset=1)], seeds=[1, 2], weights=[1, 1])
    assert Pipeline(a, seed=1).fingerprint != Pipeline(b, seed=1).fingerprint


def test_drawn_reads_each_inputs_window_to_its_end():
    # a window shuffle part way through its window: drawn() is the state with the window read
    def windowed(d):
        return chain(repeat(samples(20, dataset=d), 1), window_shuffle(8), batch(2))

    sources = [windowed(0), windowed(1)]
    p, state, _ = run_blend(sources, [1, 2], want=3, weights=[1, 1])
    drawn = p.source.drawn(state)
    assert drawn.inputs == tuple(s.drawn(st) for s, st in zip(sources, state.inputs))
    assert drawn.inputs != state.inputs  # the windows were read further
    assert (drawn.position, drawn.taken, drawn.ended) == (state.position, state.taken, state.ended)


def test_drawn_keeps_an_input_without_lookahead_as_it_is():
    # repeat has no lookahead (drawn None): its state is already its position
    src = blend_recipes(
        [repeat(samples(4), 1), repeat(samples(4), 1)], seeds=[1, 2], weights=[1, 1]
    )
    state = src.init(key(1))
    assert src.drawn(state) == state


# -- global mode: a step with nothing for this rank -----------------------------------------


def global_input(size, rank, dataset=0):
    # global batches of 4 over 2 ranks, the last one short and kept (drop_last=False): with 5
    # samples its one ref goes to one rank and the other gets nothing at that step
    dist = distribute(4, rank=rank, world_size=2, drop_last=False)
    return chain(repeat(samples(size, dataset=dataset), 1), dist, batch(2, drop_last=False))


def global_blend(rank, sizes=(5, 16)):
    sources = [global_input(n, rank, dataset=d) for d, n in enumerate(sizes)]
    return blend_recipes(sources, seeds=[1, 2], weights=[1, 1])


def test_a_step_with_nothing_for_this_rank_keeps_its_position():
    by_rank = {}
    for rank in (0, 1):
        src = global_blend(rank)
        _, got = src.next_steps(src.init(key(1)), 100)
        by_rank[rank] = got
    assert len(by_rank[0]) == len(by_rank[1])  # the same steps on every rank
    nothing = [t for t, r in enumerate(by_rank[0]) if r is None]
    assert nothing and all(by_rank[1][t] is not None for t in nothing)
    for got in by_rank.values():
        assert [r.step for r in got if r is not None] == [t for t, r in enumerate(got) if r]


def test_next_passes_over_a_step_with_nothing_and_gives_at_most_what_was_asked():
    src = global_blend(0)
    start = src.init(key(1))
    _, steps = src.next_steps(start, 100)
    outputs = [r for r in steps if r is not None]
    for want in (1, 3, 4, 7):
        _, got = src.next(start, want)
        assert [r.step for r in got] == [r.step for r in outputs[:want]]


@pytest.mark.parametrize("n", [1, 3, 4, 6, 9])
def test_skip_passes_steps_not_outputs(n):
    for rank in (0, 1):
        src = global_blend(rank)
        p = Pipeline(src, seed=1)
        want, steps = src.next_steps(p.init(), n)
        got, passed = p.skip(p.init(), n)
        assert got == want and passed == len(steps) == min(n, 6)  # 6 steps in all


def test_a_blend_of_blends_keeps_every_rank_at_the_same_step():
    states = []
    for rank in (0, 1):
        inner = global_blend(rank)
        outer = blend_recipes(
            [inner, global_input(12, rank, dataset=2)], seeds=[1, 3], weights=[1, 1], parts=[2, 1]
        )
        state, got = outer.next_steps(outer.init(key(1)), 12)
        states.append((state.taken, state.inputs[0].position, len(got)))
    assert states[0] == states[1]
