"""Passing over steps on the plan state alone: ``Pipeline.skip`` and the shortcut of
``next_recipe`` reach the states and recipes of pulling every step, and build no recipe for
the steps they pass over."""

from __future__ import annotations

import importlib

import msgspec
import numpy as np
import pytest

from fpipe.core import Pipeline, chain
from fpipe.plan import (
    BatchSchedule,
    batch,
    blend,
    distribute,
    pack,
    samples,
    slice_shuffle,
    window_shuffle,
)
from fpipe.plan.skip import next_recipe

batch_module = importlib.import_module("fpipe.plan.batch")  # the module (the package's
# ``batch`` attribute is the function)

CONFIGS = {
    "packed": dict(),
    "packed-keep-rank1of3": dict(world=3, rank=1, drop_last=False),
    "refs-rank2of2": dict(packed=False, world=2, rank=1),
    "refs-keep": dict(packed=False, drop_last=False),
    "schedule": dict(packed=False, world=2, schedule=BatchSchedule.rampup(2, 2, 40, final=8)),
}


def _plan(packed=True, world=1, rank=0, drop_last=True, schedule=None) -> Pipeline:
    rng = np.random.default_rng(0)
    views = [
        slice_shuffle(samples(k, dataset=d, columns={"tokens": rng.integers(1, 40, k)}), 7)
        for d, k in enumerate((300, 500))
    ]
    stages = [window_shuffle(50)]
    if packed:
        stages.append(pack({"tokens": 64}, strategy="greedy", packing_buffer_size=40))
    gbs = schedule or 4 * world
    per_rank = schedule.per_rank(world) if schedule else 4
    stages += [
        distribute(gbs, rank=rank, world_size=world, drop_last=drop_last),
        batch(per_rank, drop_last=drop_last),
    ]
    head = blend(views, weights=[1, 2], num_epochs=1)
    return Pipeline(chain(head, *stages), seed=3)


def _without_shortcut(p: Pipeline) -> Pipeline:
    return Pipeline(msgspec.structs.replace(p.source, skip=None), p.seed)


def _steps(p: Pipeline) -> int:
    state, count = p.init(), 0
    while True:
        state, out = p.next(state, 1)
        if not len(out):
            return count
        count += 1


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_skip_reaches_the_states_of_pulling_every_step(name):
    p = _plan(**CONFIGS[name])
    assert p.source.skip is not None  # the batch step counts its recipes
    total = _steps(p)
    assert total > 20
    for start in (0, 5):
        for n in (1, 7, total - start - 1, total + 3):
            state = p.init()
            for _ in range(start):
                state, _ = p.next(state, 1)
            got, passed = p.skip(state, n)
            want, pulled = state, 0
            for _ in range(n):
                want, out = p.next(want, 1)
                if not len(out):
                    break
                pulled += 1
            assert passed == pulled == min(n, total - start)
            assert p.snapshot(got) == p.snapshot(want)
            assert _without_shortcut(p).skip(state, n) == (want, pulled)


def _walk(p: Pipeline, ranges) -> list:
    state, out = p.init(), []
    while True:
        state, recipe, skipped = next_recipe(p, state, ranges)
        steps = None if recipe is None else (recipe.step, recipe.refs.triples())
        out.append((p.snapshot(state), steps, skipped))
        if recipe is None:
            return out


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("ranges", [((0, 3),), ((2, 9), (10, 11), (13, 15)), ((4, 10_000),)])
def test_next_recipe_shortcut_gives_the_recipes_and_states_of_pulling_every_step(name, ranges):
    p = _plan(**CONFIGS[name])
    got = _walk(p, ranges)
    assert got == _walk(_without_shortcut(p), ranges)
    assert sum(skipped for _, _, skipped in got) == min(_steps(p), 10_000) - (len(got) - 1)


def test_skipped_steps_build_no_recipe(monkeypatch):
    """Only the first recipe of a range and the one after it are built; the steps between are
    counted by the batch step."""
    built = []
    recipe_type = batch_module.Recipe

    def counting_recipe(**fields):
        built.append(fields["step"])
        return recipe_type(**fields)

    monkeypatch.setattr(batch_module, "Recipe", counting_recipe)
    p = _plan(packed=False)
    state, _ = p.next(p.init(), 1)
    built.clear()
    state, recipe, skipped = next_recipe(p, state, ((1, 40),))
    assert (recipe.step, skipped) == (40, 39)
    assert built == [1, 40]


def test_a_range_past_the_end_falls_back_once(monkeypatch):
    """Where the stream ends inside a range, the shortcut cannot confirm its count: the rest is
    pulled one recipe at a time, without trying the shortcut again for every recipe."""
    calls = []
    skip = Pipeline.skip

    def counting_skip(self, state, n):
        calls.append(n)
        return skip(self, state, n)

    monkeypatch.setattr(Pipeline, "skip", counting_skip)
    p = _plan(packed=False)
    state, recipe, skipped = next_recipe(p, p.init(), ((0, 10_000),))
    assert recipe is None and skipped == _steps(p)
    assert calls == [10_000 - 1]
