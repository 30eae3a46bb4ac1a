"""Skip ranges as the user writes them (``"A:B"``, ``range``, ``(a, b)``), how they are merged
and bounded, and that skipping delivers exactly the plain run's recipes minus the skipped
steps."""

from __future__ import annotations

import pytest

from fpipe.core import Pipeline
from fpipe.core.errors import ConfigError
from fpipe.plan.skip import (
    MAX_SKIP_RANGES,
    next_recipe,
    normalize_step_ranges,
    parse_step_range,
    skip_end,
)
from tests.plan import test_skip


def test_parse_step_range_reads_a_to_b_and_a_single_step():
    assert parse_step_range("3:7") == (3, 7)
    assert parse_step_range("12") == (12, 13)
    with pytest.raises(ConfigError, match=r"A:B.*'x:7'"):
        parse_step_range("x:7")


@pytest.mark.parametrize("one", [range(2, 5), (2, 5), [2, 5], "2:5"])
def test_one_range_alone_is_one_range(one):
    assert normalize_step_ranges(one) == ((2, 5),)
    assert normalize_step_ranges([one]) == ((2, 5),)


def test_no_ranges_and_the_edges_of_valid_ranges():
    assert normalize_step_ranges(None) == ()
    assert normalize_step_ranges([]) == ()
    assert normalize_step_ranges([(0, 1)]) == ((0, 1),)  # step 0 may be skipped
    ranges = [(2 * i, 2 * i + 1) for i in range(MAX_SKIP_RANGES)]
    assert normalize_step_ranges(ranges) == tuple(ranges)  # exactly the most a state keeps


def test_overlapping_and_touching_ranges_merge_into_the_last_one():
    assert normalize_step_ranges([(0, 2), (5, 7), (6, 9), (8, 8 + 1)]) == ((0, 2), (5, 9))
    assert normalize_step_ranges([(0, 10), (2, 4)]) == ((0, 10),)  # contained: no shrink
    assert normalize_step_ranges([(1, 3), (3, 4), (6, 7)]) == ((1, 4), (6, 7))


@pytest.mark.parametrize(
    "bad, match",
    [
        (5, r"list of \(a, b\) pairs, got 5"),
        ([range(0, 10, 2)], r"step 1, got range\(0, 10, 2\)"),
        ([(1, 2, 3)], r"range\(a, b\), \(a, b\) or 'a:b'.*\(1, 2, 3\)"),
        ([(True, 3)], r"range\(a, b\).*\(True, 3\)"),
        ([(4, 4)], r"\[4, 4\) needs 0 <= a < b"),
        ([(-1, 3)], r"\[-1, 3\) needs 0 <= a < b"),
        (
            [(2 * i, 2 * i + 1) for i in range(MAX_SKIP_RANGES + 1)],
            r"33 skip ranges after merging; a run keeps at most 32 "
            r"\(merge nearby ones into one range\)",
        ),
    ],
)
def test_bad_ranges_are_refused_saying_what_is_wrong(bad, match):
    with pytest.raises(ConfigError, match=match):
        normalize_step_ranges(bad)


def test_skip_end_is_the_end_of_the_range_holding_the_step():
    ranges = ((2, 4), (6, 9))
    ends = [skip_end(s, ranges) for s in range(11)]
    assert ends == [None, None, 4, 4, None, None, 9, 9, 9, None, None]


def _plain(p: Pipeline) -> list:
    state, out = p.init(), []
    while True:
        state, chunk = p.next(state, 1)
        if not len(chunk):
            return out
        out.append(chunk[0])


def _skipping(p: Pipeline, ranges) -> list:
    state, out = p.init(), []
    while True:
        state, recipe, _ = next_recipe(p, state, ranges)
        if recipe is None:
            return out
        out.append(recipe)


@pytest.mark.parametrize("ranges", [(), ((2, 4),), ((0, 1), (5, 8), (60, 10_000))])
def test_next_recipe_delivers_the_plain_runs_recipes_minus_the_skipped_steps(ranges):
    p = test_skip._plan(packed=False)
    plain = _plain(p)
    kept = [r for r in plain if skip_end(r.step, ranges) is None]
    got = _skipping(p, ranges)
    assert [r.step for r in got] == [r.step for r in kept]
    assert [r.refs.triples() for r in got] == [r.refs.triples() for r in kept]


def test_a_range_of_two_steps_builds_only_its_first_recipe(monkeypatch):
    """The second step of a two-step range is counted by the batch step, not built."""
    built = []
    recipe_type = test_skip.batch_module.Recipe

    def counting_recipe(**fields):
        built.append(fields["step"])
        return recipe_type(**fields)

    monkeypatch.setattr(test_skip.batch_module, "Recipe", counting_recipe)
    p = test_skip._plan(packed=False)
    state, _ = p.next(p.init(), 1)
    built.clear()
    state, recipe, skipped = next_recipe(p, state, ((1, 3),))
    assert (recipe.step, skipped) == (3, 2)
    assert built == [1, 3]
