"""Mixed batches of several datasets: Energon's ``MixBatchDataset``.

``mix_datasets([(ds_a, 2), (ds_b, 8)], batch_size=10, batch_mix_fn=...)`` draws, ``batch_size``
times per step, the next batch of one of the datasets chosen by weight (as
:func:`fpipe.datasets.blend_datasets` does for every step), and combines the drawn batches with
``batch_mix_fn`` (default: the list of them). The datasets are usually built with
``batch_size=1``, each with its own task encoder, so a step holds ``batch_size`` samples of
mixed origin: ``homogeneous_concat_mix`` concatenates them into one batch.

It is the blend's plan with a grouping step (:mod:`fpipe.plan.recipe_mix`) and a materializer
that builds each draw with its dataset's own materializer (:mod:`fpipe.materialize.mix`), so the
result is again a planned dataset: exact resume, and the same batches for any ``num_workers``
or worker mode.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

from fpipe.core import Pipeline
from fpipe.core.errors import ConfigError
from fpipe.datasets.batch_blend import CombinedDataset, blend_datasets
from fpipe.materialize.mix import MixMaterializer, list_mix
from fpipe.plan.recipe_mix import mix_recipes

__all__ = ["mix_datasets"]


def mix_datasets(
    dataset_weights: Sequence[tuple[Any, float]],
    batch_size: int,
    batch_mix_fn: Callable[[list], Any] = list_mix,
) -> CombinedDataset:
    """A dataset whose every step is ``batch_mix_fn`` of ``batch_size`` batches, each the next
    batch of a dataset of ``dataset_weights`` chosen by weight (see the module docstring).

    The draws are the blend's (:func:`fpipe.datasets.blend_datasets`): a pure function of the
    first dataset's seed and the draw's number. ``batch_mix_fn`` gets the drawn batches in draw
    order and returns the step's batch (or a generator of batches, each delivered); it runs in
    the worker, so with worker processes it must be picklable (a module-level function).
    ``len()`` is ``ceil(sum of the datasets' lengths / batch_size)`` (Energon's).

    Example::

        from fpipe.energon import homogeneous_concat_mix
        ds = mix_datasets([(get_train_dataset("a", batch_size=1), 2),
                           (get_train_dataset("b", batch_size=1), 8)],
                          batch_size=10, batch_mix_fn=homogeneous_concat_mix)
    """
    if not callable(batch_mix_fn):
        raise ConfigError(f"mix_datasets: batch_mix_fn must be callable, got {batch_mix_fn!r}")
    blend = blend_datasets(dataset_weights)
    source = mix_recipes(blend.plan.source, batch_size)
    total = blend.num_batches
    return dataclasses.replace(
        blend,
        plan=Pipeline(source, seed=blend.plan.seed),
        materializer=MixMaterializer(blend.materializer.parts, batch_mix_fn),  # type: ignore[attr-defined]
        num_batches=None if total is None else math.ceil(total / batch_size),
        path=f"mix{blend.path[len('blend') :]}",
    )
