"""The materializer of mixed batches: each member recipe built by its own dataset's
materializer, the results combined by a ``batch_mix_fn`` (Energon's ``MixBatchDataset``).

A mixed recipe (:mod:`fpipe.plan.recipe_mix`) holds several recipes, each tagged with the
dataset that planned it. :class:`MixMaterializer` is a
:class:`~fpipe.materialize.parts.PartsMaterializer` that builds every member with its part's
materializer (its own sources, task encoder and batch size) and calls ``batch_mix_fn`` on the
list of their batches, in draw order. Positions in a mixed recipe (samples excluded after they
killed a worker, the sample a worker is on) count across its members' refs in order.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

from fpipe.core.records import Recipe
from fpipe.materialize.materializer import MaterializedBatch, Materializer
from fpipe.materialize.parts import PartsMaterializer

__all__ = ["MixMaterializer", "member_at", "members"]


def members(recipe: Recipe) -> tuple[Recipe, ...]:
    """The recipes ``recipe`` is built from: its ``mix``, or itself."""
    return recipe.mix or (recipe,)


def member_at(recipe: Recipe, position: int) -> tuple[Recipe, int]:
    """The member recipe that holds sample ``position`` of ``recipe``, and its position there."""
    for member in members(recipe):
        if position < len(member):
            return member, position
        position -= len(member)
    raise IndexError(
        f"position beyond the {len(recipe)} samples of the recipe of step {recipe.step}"
    )


def list_mix(batches: list) -> list:
    """Energon's default ``batch_mix_fn``: the list of the members' batches."""
    return batches


class MixMaterializer(PartsMaterializer):
    """``mixed recipe -> batch_mix_fn([batch of each member])``; a plain recipe is built by its
    part's materializer. Picklable where ``batch_mix_fn`` is."""

    def __init__(
        self, materializers: Sequence[Any], batch_mix_fn: Callable[[list], Any] = list_mix
    ):
        super().__init__(materializers)
        self.batch_mix_fn = batch_mix_fn

    def leaf(self, recipe: Recipe) -> Materializer:
        """The materializer of ``recipe``'s part; for a mixed recipe, of its first member (ask
        per member, :func:`members`, for the datasets of the others)."""
        return super().leaf(members(recipe)[0])

    def recipe_keys(self, recipe: Recipe) -> tuple[str, ...]:
        """The sample keys of a recipe, in order (each member read by its part)."""
        return tuple(k for m in members(recipe) for k in super().recipe_keys(m))

    def __call__(
        self,
        recipe: Recipe,
        *,
        exclude: frozenset[int] = frozenset(),
        mark: Callable[[int], None] | None = None,
    ) -> MaterializedBatch:
        """The mixed batch of ``recipe``: ``batch_mix_fn`` of its members' batches (a member
        whose every sample was skipped gives none)."""
        if not recipe.mix:
            return super().__call__(recipe, exclude=exclude, mark=mark)
        batches: list = []
        num = skipped = 0
        skipped_keys: list = []
        offset = 0
        for member in recipe.mix:
            size = len(member)
            own = frozenset(p - offset for p in exclude if offset <= p < offset + size)
            sub_mark = None
            if mark is not None:
                sub_mark = _shifted(mark, offset)
            got = self.leaf(member)(member, exclude=own, mark=sub_mark)
            if got.batches is not None:  # a generator encode_batch: each batch it yielded
                batches.extend(got.batches)
            elif got.batch is not None:
                batches.append(got.batch)
            num += got.num_samples
            skipped += got.skipped
            skipped_keys += got.skipped_keys
            offset += size
        mixed = self.batch_mix_fn(batches) if batches else None
        many = None
        if isinstance(mixed, Generator):  # Energon: a generator's batches are each delivered
            many, mixed = list(mixed), None
        return MaterializedBatch(
            step=recipe.step,
            batch=mixed,
            num_samples=num,
            skipped=skipped,
            skipped_keys=skipped_keys,
            batches=many,
        )


def _shifted(mark: Callable[[int], None], offset: int) -> Callable[[int], None]:
    """``mark`` for a member that starts at ``offset`` in the mixed recipe (-1 stays -1)."""
    return lambda p: mark(p if p < 0 else p + offset)
