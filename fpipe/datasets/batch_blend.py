"""Blends and concatenations of whole datasets: each step is the next batch of one of them.

``blend_datasets([(ds_a, 2), (ds_b, 8)])`` takes datasets that ``get_train_dataset`` /
``get_val_dataset`` built, each with its own batch size, task encoder, shuffle and seed, and
yields at each step the next batch of one of them, chosen by weight (Energon's
``BlendDataset``). ``concat_datasets([ds_a, ds_b])`` yields every batch of ``ds_a``, then every
batch of ``ds_b`` (Energon's ``ConcatDataset``).

Both are a plan over the datasets' plans (:mod:`fpipe.plan.recipe_blend`) and a materializer
over their materializers (:mod:`fpipe.materialize.parts`), so the result is again a planned
dataset: the loader's state holds the blend's position and each dataset's own plan state (exact
resume; any world size where each dataset restores on any), and the batches are the same for
any ``num_workers`` or worker mode. To mix *samples* of several datasets in each batch, blend
them in a metadataset instead (docs/metadataset.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from fpipe.core import Pipeline
from fpipe.core.errors import ConfigError
from fpipe.loader.planned import PlannedDataset
from fpipe.materialize.parts import PartsMaterializer, leaves
from fpipe.plan.recipe_blend import blend_recipes

__all__ = ["CombinedDataset", "blend_datasets", "concat_datasets"]


@dataclasses.dataclass(frozen=True)
class CombinedDataset(PlannedDataset):
    """A blend or concatenation of ``parts`` (the datasets, in order); ``weights`` are the
    blend's weights as given (None for a concatenation)."""

    parts: tuple[PlannedDataset, ...] = ()
    weights: tuple[float, ...] | None = None

    @property
    def dataset_weights(self) -> tuple[tuple[PlannedDataset, float], ...]:
        """Energon's ``BlendDataset.dataset_weights``: ``((dataset, weight), ...)``; empty for
        a concatenation."""
        if self.weights is None:
            return ()
        return tuple(zip(self.parts, self.weights, strict=True))


def _check(datasets: Sequence[Any], what: str) -> list[PlannedDataset]:
    if not datasets:
        raise ConfigError(f"{what} needs at least one dataset")
    out = []
    for i, ds in enumerate(datasets):
        if not isinstance(ds, PlannedDataset):
            raise ConfigError(
                f"{what}: dataset {i} is a {type(ds).__name__}; pass datasets that "
                "get_train_dataset / get_val_dataset built (or a blend of them)"
            )
        out.append(ds)
    first = out[0].topology
    for i, ds in enumerate(out):
        topo = ds.topology
        if (topo.rank, topo.world_size) != (first.rank, first.world_size):
            raise ConfigError(
                f"{what}: dataset {i} was built for rank {topo.rank} of {topo.world_size}, "
                f"dataset 0 for rank {first.rank} of {first.world_size}; build every dataset "
                "with the same worker_config / topology"
            )
        # Options the loader applies around the plan, which a step of the blend cannot keep.
        refused = {
            "packing_buffer_size": ds.packing_buffer_size,
            "batch_group_criterion (grouped batching)": getattr(ds, "group_batches", False),
            "virtual_epoch_length": ds.virtual_epoch_length,
            "skip_steps": ds.skip_steps,
            "LimitDataset over a packing dataset (limit)": ds.limit,
        }
        for option, value in refused.items():
            if value:
                raise ConfigError(
                    f"{what}: dataset {i} has {option}={value!r}, which the loader applies to "
                    f"a whole stream of batches, not to one dataset of a {what}; build the "
                    f"datasets without it (to skip steps, call loader.skip(...) on the {what}'s "
                    "loader)"
                )
    return out


def _blended(
    parts: list[PlannedDataset], source: Any, kind: str, weights: Any = None
) -> CombinedDataset:
    lengths = [ds.num_batches for ds in parts]
    return CombinedDataset(
        plan=Pipeline(source, seed=parts[0].plan.seed),
        materializer=PartsMaterializer([ds.materializer for ds in parts]),  # type: ignore[arg-type]
        topology=parts[0].topology,
        batch_size=0,  # each dataset batches with its own size
        distribution=parts[0].distribution,
        drop_last=parts[0].drop_last,
        num_batches=None if None in lengths else sum(lengths),  # type: ignore[arg-type]
        path=f"{kind}({', '.join(ds.path or '?' for ds in parts)})",
        split=parts[0].split,
        parts=tuple(parts),
        weights=None if weights is None else tuple(weights),
    )


def blend_datasets(dataset_weights: Sequence[tuple[Any, float]]) -> CombinedDataset:
    """A dataset whose every step is the next batch of one of ``dataset_weights``' datasets,
    chosen with probability ``weight / sum(weights)`` among those that have not ended (the
    blend ends when all have; it repeats as long as one of them does).

    Each dataset keeps its own batch size, task encoder, shuffle and seed: its batches are the
    ones it gives alone, in its order. The choice of step ``t`` is a pure function of the first
    dataset's seed and ``t``, so the blend is exact on resume and the same for any number of
    workers. ``len()`` is the sum of the datasets' lengths (Energon's).

    Example::

        ds = blend_datasets([(get_train_dataset("a", batch_size=10), 2),
                             (get_train_dataset("b", batch_size=20), 8)])
    """
    pairs = list(dataset_weights)
    for i, pair in enumerate(pairs):
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise ConfigError(f"blend_datasets: entry {i} is not a (dataset, weight) pair")
    parts = _check([ds for ds, _ in pairs], "blend")
    source = blend_recipes(
        [ds.plan.source for ds in parts],
        seeds=[ds.plan.seed for ds in parts],
        weights=[w for _, w in pairs],
        parts=[len(leaves(ds.materializer)) for ds in parts],
    )
    return _blended(parts, source, "blend", [w for _, w in pairs])


def concat_datasets(datasets: Sequence[Any]) -> CombinedDataset:
    """A dataset that yields every batch of ``datasets[0]``, then of ``datasets[1]``, ... (each
    with its own batch size and task encoder). A dataset that repeats forever never ends, so
    the ones after it are never reached: concatenate finite datasets (validation,
    ``repeat=False``). ``len()`` is the sum of their lengths."""
    parts = _check(list(datasets), "concatenation")
    source = blend_recipes(
        [ds.plan.source for ds in parts],
        seeds=[ds.plan.seed for ds in parts],
        mode="concat",
        parts=[len(leaves(ds.materializer)) for ds in parts],
        name="concat_batches",
    )
    return _blended(parts, source, "concat")
