"""Random-access views of one epoch of sample references, and the source they start from.

A :class:`~fpipe.core.stage.View` maps positions ``[0, size)`` of an epoch to refs:
``gather(root, epoch, positions) -> Refs``. Views compose (:func:`fpipe.plan.slice_shuffle` is
a view over a view) and are turned into a stream by :func:`fpipe.plan.repeat`. Random access is
what makes restores O(1): a stream position is just ``(epoch, position)``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.core.records import Config, Refs
from fpipe.core.stage import View
from fpipe.plan.index_digest import array_digest as _digest
from fpipe.plan.index_digest import range_digest

__all__ = ["InMemoryConfig", "SamplesConfig", "View", "in_memory", "samples"]


class SamplesConfig(Config, frozen=True):
    """Samples ``indices`` (or 0..num_samples-1) of dataset ``dataset``, with metadata columns.

    ``source_id`` identifies where the samples come from (a dataset path and split, say) so a
    restore into a pipeline over other data is refused; ``indices`` is a digest of the sample
    indices when they are given (empty for ``0..num_samples-1``).
    """

    num_samples: int
    indices: str = ""
    dataset: int = 0
    columns: tuple[str, ...] = ()
    source_id: str = ""


def samples(
    num_samples: int | None = None,
    *,
    indices: np.ndarray | range | None = None,
    dataset: int = 0,
    columns: Mapping[str, np.ndarray] | None = None,
    source_id: str = "",
    name: str = "samples",
) -> View:
    """A view of samples in index order: position p is sample ``indices[p]`` (or p).

    ``indices`` may be a ``range`` (step 1): the samples ``start..stop-1`` of a split of
    whole shards, the same view and config as ``np.arange(start, stop)`` gives, with no
    array of them built or hashed (see :mod:`fpipe.plan.index_digest`).

    ``columns`` are per-sample metadata arrays indexed by sample index (memory-mapped index
    columns work); they are gathered into every ref chunk.

    Example:
        >>> v = samples(4, columns={"tokens": np.array([5, 6, 7, 8])})
        >>> v.gather(0, 0, np.array([2, 0])).column("tokens").tolist()
        [7, 5]
    """
    # a range of step 1 is kept as its two ends (span); other indices become an array (arr)
    span = indices if isinstance(indices, range) and indices.step == 1 else None
    arr = None if span is not None or indices is None else np.asarray(indices, dtype=np.int64)
    if indices is not None:
        if num_samples is not None and num_samples != len(indices):
            raise ConfigError(f"num_samples={num_samples} but {len(indices)} indices given")
        num_samples = len(indices)
    if num_samples is None or num_samples < 0:
        raise ConfigError(f"samples() needs num_samples >= 0 or indices, got {num_samples}")
    columns = dict(columns or {})
    for cname, col in columns.items():
        if cname in ("dataset", "index", "epoch"):
            raise ConfigError(f"metadata column name {cname!r} is reserved")
        if span is not None:
            limit = span.stop if len(span) else 0
        elif arr is not None and len(arr):
            limit = int(arr.max()) + 1
        else:
            limit = num_samples
        if len(col) < limit:
            raise ConfigError(f"column {cname!r} has {len(col)} rows, samples need {limit}")
    config = SamplesConfig(
        num_samples=num_samples,
        indices=_indices_digest(arr, span),
        dataset=dataset,
        columns=tuple(sorted(columns)),
        source_id=source_id,
    )
    dataset_i32 = np.int32(dataset)

    def gather(key, epoch, positions):
        idx: np.ndarray
        if span is not None:  # what indices[positions] is for indices = arange(start, stop)
            idx = np.asarray(positions, dtype=np.int64) + span.start
        else:
            idx = positions if arr is None else arr[positions]
        cols = {
            "index": idx,
            "dataset": np.full(len(idx), dataset_i32, dtype=np.int32),
            "epoch": np.full(len(idx), epoch, dtype=np.int64),
        }
        for cname, col in columns.items():
            cols[cname] = np.asarray(col[idx])
        return Refs(cols)

    return View(name=name, config=config, size=num_samples, gather=gather)


def _indices_digest(indices: np.ndarray | None, span: range | None) -> str:
    """The config's digest of the sample indices: none for 0..num_samples-1 given as a count."""
    if span is not None:
        return range_digest(span.start, span.stop)
    return "" if indices is None else _digest(indices)


class InMemoryConfig(Config, frozen=True):
    """A fixed chunk of refs held in memory: its length, a digest of its columns, an id."""

    num_refs: int
    refs: str = ""
    source_id: str = ""


def in_memory(refs: Refs, *, source_id: str = "", name: str = "in_memory") -> View:
    """A view over a fixed chunk of refs (tests, small tools); each epoch re-tags ``epoch``.

    Example:
        >>> v = in_memory(Refs.of(index=[7, 8, 9]))
        >>> v.gather(0, 2, np.array([2])).triples()
        [(0, 9, 2)]
    """
    names = sorted(refs.columns)
    digest = _digest(np.array(names), *(refs.columns[n] for n in names))
    config = InMemoryConfig(num_refs=len(refs), refs=digest, source_id=source_id)

    def gather(key, epoch, positions):
        out = refs[positions]
        return out.with_columns(epoch=np.full(len(out), epoch, dtype=np.int64))

    return View(name=name, config=config, size=len(refs), gather=gather)
