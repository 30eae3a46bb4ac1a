"""The datasets a materializer reads: how each is opened, read and cooked.

:class:`DatasetSource` is what the loader hands its workers about one dataset (path, open
arguments, sample type, field map, joins); each worker opens it once with :func:`open_source`
and reads a chunk of samples with :func:`read_many_held`, which keeps one bad sample, or one
failed read, from stopping the rest of the chunk.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fpipe.core.errors import ConfigError, FpipeError, error_text

__all__ = ["DatasetSource", "open_source", "read_many_held"]


def read_many_held(ds, indices: np.ndarray, wanted, limits) -> list[tuple]:
    """``ds.read_many(indices, wanted, limits=limits)``; if that call itself fails, each sample
    holds its exception as ``(None, error)``, raised in the sample's turn (the error policy then
    applies to each)."""
    try:
        return ds.read_many(indices, wanted, limits=limits)
    except Exception as e:  # noqa: BLE001 - raised in each of its samples' turn
        return [(None, e)] * len(indices)


def open_source(src: DatasetSource):
    """``open_dataset(src.path, **src.open_kwargs)``, in a worker, after the loader was built:
    an error that is not fpipe's own (an ``OSError`` of a mount gone stale, an object store's
    error) becomes a :class:`ConfigError` naming the dataset."""
    from fpipe.storage.read.layouts import open_dataset

    try:
        return open_dataset(src.path, **src.open_kwargs)
    except FpipeError:
        raise
    except Exception as e:  # noqa: BLE001 - re-raised, naming the dataset
        raise ConfigError(
            f"{src.path}: cannot open the dataset ({type(e).__name__}: {error_text(e)})"
        ) from e


@dataclasses.dataclass(frozen=True)
class DatasetSource:
    """How to read and cook the samples of one dataset of a pipeline.

    ``path`` and ``open_kwargs`` open it (in each worker, lazily); ``sample_type`` and
    ``field_map`` come from dataset.yaml unless overridden; ``subflavors`` are attached.
    ``join``: the datasets joined to this one by sample key
    (:class:`~fpipe.materialize.join.JoinSource`), ``joiner`` the sample type they are joined
    into (None: this dataset's), ``join_name`` this dataset's name among named parts.
    """

    path: str
    sample_type: str
    field_map: dict
    subflavors: dict = dataclasses.field(default_factory=dict)
    open_kwargs: dict = dataclasses.field(default_factory=dict)
    join: tuple = ()
    joiner: str | None = None
    join_name: str = ""
    #: Energon's ``aux:``: the auxiliary file stores (:class:`~fpipe.storage.config.AuxRef`)
    #: passed to the cookers of a crude dataset.
    aux: tuple = ()
