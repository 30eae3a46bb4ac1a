"""Bucketed and grouped batching, one sample at a time (docs/buckets.md and the exact rules of
docs/design/buckets.md).

An epoch view's epochs are cut into windows; each window's refs are assigned to groups (OpenSora's
buckets by ``width``, ``height`` and frames, or a criterion's groups), each group's members are
permuted, and every global step takes one group for all ranks, drawn from the whole global
batches the groups have left. :func:`group_steps` yields the global steps with every rank's part;
the world size may change from a step on (an elastic restore), which changes the global batches
and nothing else.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from property_tests.reference.blend import pick
from property_tests.reference.rng import fold_in, name_id, permute, step_key, uniform
from property_tests.reference.stages import Counters
from property_tests.reference.views import EpochView, Ref

UNFIT, REJECTED = -1, -2
ASSIGN_TAG, SHUFFLE_TAG, CHOOSE_TAG, SAMPLE_TAG = 0xA551C7, 0x5B0F1E, 0xB0C7E7, 0x5A3F1E


@dataclasses.dataclass(frozen=True)
class Bucket:
    ratio: float  # W / H of the aspect ratio key
    height: int
    width: int
    frames: int
    probability: float
    batch_size: int

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.frames, self.height, self.width)


def _ratio(key: str) -> float:
    w, h = key.split(":")
    return float(w) / float(h)


def _even(x: float) -> int:
    return max(2, 2 * round(x / 2))


def buckets(config: Mapping) -> list[Bucket]:
    """OpenSora's ``bucket_config`` (aspect ratio -> resolution -> frames -> (p, bs)) as buckets
    in the canonical order: aspect ratio, pixel area, height, frames (docs/buckets.md)."""
    out = []
    for aspect, resolutions in config.items():
        r = _ratio(aspect)
        for res, frames in resolutions.items():
            if isinstance(res, int):  # the square's side, else the short side
                h, w = (res, res if r == 1 else _even(res * r)) if r >= 1 else (_even(res / r), res)
            else:
                h, w = (int(x) for x in res.split("x"))
            for t, (p, bs) in frames.items():
                out.append(Bucket(r, h, w, int(t), float(p), bs or 0))
    return sorted(out, key=lambda b: (b.ratio, b.height * b.width, b.height, b.frames))


def bucket_of(table: Sequence[Bucket], k: int, ref: Ref, w, h, t) -> int:
    """The bucket id of a sample of width ``w``, height ``h`` and ``t`` frames (None: no frame
    column), or UNFIT / REJECTED; ``k`` is the step's key."""
    if not all(isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in (w, h)):
        return UNFIT
    w, h = float(w), float(h)
    frames = 1 if t is None or math.isnan(t) or t < 1 else math.floor(t)
    ratios = sorted({b.ratio for b in table})
    logs = [math.log(r) for r in ratios]
    x = math.log(w / h)
    a = sum(1 for i in range(len(logs) - 1) if (logs[i] + logs[i + 1]) / 2 < x)
    mine = [(i, b) for i, b in enumerate(table) if b.ratio == ratios[a]]
    levels = sorted({(b.height, b.width) for _, b in mine}, key=lambda hw: (-hw[0] * hw[1], hw[0]))
    draw_key = fold_in(k, ASSIGN_TAG)
    fits = False
    for level, (bh, bw) in enumerate(levels):
        if bh * bw > w * h:
            continue
        here = [(b.frames, i) for i, b in mine if (b.height, b.width) == (bh, bw)]
        if frames <= 1:
            options = [o for o in here if o[0] == 1]
        else:
            options = [o for o in here if 1 < o[0] <= frames]
        if not options:
            continue
        fits = True
        bid = max(options)[1]
        if uniform(draw_key, ref.dataset, ref.index, ref.epoch, level) < table[bid].probability:
            return bid
    return REJECTED if fits else UNFIT


@dataclasses.dataclass(frozen=True)
class Group:
    ident: int  # the recipe's bucket id
    shape: tuple
    batch_size: int
    members: list


def bucket_groups(config: Mapping, width="width", height="height", frames="num_frames"):
    """The window's groups by OpenSora's buckets: ``(refs, k) -> (groups, unfit, rejected)``."""
    table = buckets(config)

    def groups(refs: list[Ref], k: int):
        members: list[list[Ref]] = [[] for _ in table]
        unfit = rejected = 0
        for r in refs:
            t = None if frames is None else r.meta[frames]
            bid = bucket_of(table, k, r, r.meta[width], r.meta[height], t)
            if bid == UNFIT:
                unfit += 1
            elif bid == REJECTED:
                rejected += 1
            else:
                members[bid].append(r)
        out = [Group(i, b.shape, b.batch_size, m) for i, (b, m) in enumerate(zip(table, members))]
        return out, unfit, rejected

    return groups


def criterion_groups(criterion: Callable[[dict], tuple], columns: Sequence[str]):
    """The window's groups by ``criterion(row) -> (group, batch_size)``, numbered by first
    appearance; a group None is unfit."""

    def groups(refs: list[Ref], k: int):
        found: dict[Any, Group] = {}
        unfit = 0
        for r in refs:
            g, bs = criterion({c: r.meta[c] for c in columns})
            if g is None:
                unfit += 1
                continue
            if g not in found:
                ident = g if isinstance(g, int) else name_id(g)
                found[g] = Group(ident, (), bs, [])
            found[g].members.append(r)
        return list(found.values()), unfit, 0

    return groups


def permuted(items: list, k: int) -> list:
    return [items[permute(k, len(items), j)] for j in range(len(items))]


class NoBatch(Exception):
    """An endless stream left more windows than an epoch has without a batch (the plan
    refuses it)."""


@dataclasses.dataclass(frozen=True)
class GroupStep:
    """Global step ``step``: its group's id and shape, and rank ``r``'s refs ``ranks[r]``."""

    step: int
    ident: int
    shape: tuple
    ranks: tuple[tuple[Ref, ...], ...]


def group_steps(
    view: EpochView,
    root: int,
    groups,
    *,
    world: Callable[[int], int],
    window: int | None = None,
    shuffle: bool = True,
    drop_last: bool = True,
    num_epochs: int | None = None,
    name: str = "bucket",
    counters: Counters | None = None,
) -> Iterator[GroupStep]:
    """The global steps of grouped batching over ``view``; ``world(step)`` is the world size at
    a global step."""
    counters = Counters() if counters is None else counters
    k = step_key(root, name)
    n = view.size
    win = window or n
    step = 0
    left_without = 0  # windows ended since the last step (the one it was in included)
    for e in itertools.count() if num_epochs is None else range(num_epochs):
        epoch_refs = list(view.epoch(root, e))
        for b in range(-(-n // win)):
            gs, unfit, rejected = groups(epoch_refs[b * win : (b + 1) * win], k)
            counters.add("unfit", unfit)
            counters.add("rejected", rejected)
            if shuffle:  # member j of group i is the one at pi(j)
                sk = fold_in(k, SHUFFLE_TAG, e, b)
                gs = [dataclasses.replace(g, members=permuted(g.members, fold_in(sk, i)))
                      for i, g in enumerate(gs)]  # fmt: skip
            ck = fold_in(k, CHOOSE_TAG, e, b)
            given = [0] * len(gs)
            j = 0
            while True:
                W = world(step)
                full = [
                    (len(g.members) - c) // (g.batch_size * W) if g.batch_size else 0
                    for g, c in zip(gs, given)
                ]
                if any(full):
                    gi = pick(full, uniform(ck, j))
                    g, c, bs = gs[gi], given[gi], gs[gi].batch_size
                    parts = tuple(tuple(g.members[c + r * bs : c + (r + 1) * bs]) for r in range(W))
                    given[gi] += bs * W
                else:
                    left = [len(g.members) - c for g, c in zip(gs, given)]
                    gi = next((i for i, x in enumerate(left) if x >= W), None)
                    if drop_last or gi is None:
                        counters.add("group_remainder", sum(left))
                        break
                    g, c, m = gs[gi], given[gi], left[gi]
                    cut = [round(r * (m / W)) for r in range(W)] + [m]
                    parts = tuple(tuple(g.members[c + cut[r] : c + cut[r + 1]]) for r in range(W))
                    given[gi] = len(g.members)
                yield GroupStep(step, g.ident, g.shape, parts)
                left_without = 0
                step += 1
                j += 1
            left_without += 1
            if num_epochs is None and left_without > -(-n // win):
                raise NoBatch(f"a whole epoch gave no batch (step {step})")
