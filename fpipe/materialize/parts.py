"""The materializer of a blend or concatenation of whole datasets: each recipe is built by the
materializer of the dataset that planned it.

A blend of planned datasets (:mod:`fpipe.plan.recipe_blend`) tags each recipe with ``part``,
the dataset it came from. :class:`PartsMaterializer` holds one
:class:`~fpipe.materialize.materializer.Materializer` per part (each with its own sources, task
encoder, batch size and decode options) and hands every recipe to its part's. What reads a
recipe's refs outside materializing (read-ahead, naming a sample that killed a worker) asks
:meth:`PartsMaterializer.leaf` for the materializer that knows them, as it would ask a plain
materializer (whose ``leaf`` is itself). A blend of blends is flattened: its parts are the
parts of its inputs, in order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fpipe.core.errors import ConfigError
from fpipe.core.records import Recipe
from fpipe.materialize.materializer import MaterializedBatch, Materializer

__all__ = ["PartsMaterializer", "leaves"]


def leaves(materializer: Any) -> list[Materializer]:
    """The plain materializers ``materializer`` dispatches to, in part order (itself when it is
    one)."""
    if isinstance(materializer, PartsMaterializer):
        return list(materializer.parts)
    return [materializer]


class PartsMaterializer:
    """``recipe -> batch`` by the materializer of ``recipe.part``; picklable (each part opens
    its datasets lazily in the process it runs in)."""

    def __init__(self, materializers: Sequence[Any]):
        parts = [leaf for m in materializers for leaf in leaves(m)]
        if not parts:
            raise ConfigError("a blend of datasets needs at least one dataset")
        self.parts: tuple[Materializer, ...] = tuple(parts)
        #: every part's sources (what the loader checks for object storage)
        self.sources = [s for p in self.parts for s in p.sources]
        #: the first part's task encoder (the loader pins batches with it)
        self.task_encoder = self.parts[0].task_encoder
        self.packing = False  # a part with a packing buffer is refused when the blend is built

    def copy(self) -> PartsMaterializer:
        """A copy whose parts open their own datasets (what a thread worker gets)."""
        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__)
        other.parts = tuple(p.copy() for p in self.parts)
        return other

    def leaf(self, recipe: Recipe) -> Materializer:
        """The materializer of ``recipe``'s part (a ConfigError for a part it does not have)."""
        if not 0 <= recipe.part < len(self.parts):
            raise ConfigError(
                f"recipe of step {recipe.step} names part {recipe.part}, but the blend has "
                f"{len(self.parts)} datasets"
            )
        return self.parts[recipe.part]

    @property
    def error_policy(self) -> Any:
        """The first part's error policy (each part applies its own to its recipes)."""
        return self.parts[0].error_policy

    def recipe_keys(self, recipe: Recipe) -> tuple[str, ...]:
        """The sample keys of a recipe, in order (read by its part)."""
        return self.leaf(recipe).recipe_keys(recipe)

    def __call__(
        self,
        recipe: Recipe,
        *,
        exclude: frozenset[int] = frozenset(),
        mark: Callable[[int], None] | None = None,
    ) -> MaterializedBatch:
        """The batch of ``recipe``, built by its part's materializer."""
        return self.leaf(recipe)(recipe, exclude=exclude, mark=mark)
