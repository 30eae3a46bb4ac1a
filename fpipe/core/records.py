"""Plain records shared by every tier: config and state bases, ref chunks and batch recipes.

State records are frozen msgspec Structs encoded as arrays (``array_like``), so a snapshot holds
values only, never field names or code. :class:`Refs` is *not* state: it is the chunk of sample
references that flows between plan stages, held as numpy columns so the plan tier runs at
millions of refs per second.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import msgspec
import numpy as np

from fpipe.core.rng import Key

__all__ = ["Config", "Recipe", "Refs", "State", "Unit"]


class State(msgspec.Struct, frozen=True, array_like=True):
    """Base of every state record: frozen, encoded as an array of its fields."""


class Unit(State, frozen=True, array_like=True):
    """The state of a stage that keeps none (map-like stages)."""


class Config(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of every stage config: plain data that describes the stage and is fingerprinted.

    ``compatible`` lists fields whose change a snapshot restore accepts (for example the rank
    and world size of a distribute stage in global mode): they are left out of the fingerprint.
    """

    compatible: ClassVar[frozenset[str]] = frozenset()
    #: Said after the differences when a restore is refused over this config (why, and how
    #: to change course), e.g. per-rank distribution on another world size.
    mismatch_hint: ClassVar[str] = ""


# Columns every ref chunk has; any other column is index metadata (width, tokens, ...).
REQUIRED_COLUMNS = ("dataset", "index", "epoch")
_DTYPES = {"dataset": np.int32, "index": np.int64, "epoch": np.int64}


class Refs:
    """A chunk of sample references as columns of equal length.

    ``dataset``: which dataset of a blend (int32); ``index``: sample index in that dataset
    (int64); ``epoch``: repetition number (int64); other columns: metadata from the index.

    Example:
        >>> r = Refs.of(index=[3, 1, 2], width=[10, 20, 30])
        >>> len(r), r[1:].index.tolist(), r.column("width").tolist()
        (3, [1, 2], [10, 20, 30])
    """

    __slots__ = ("columns",)

    def __init__(self, columns: Mapping[str, np.ndarray]):
        self.columns = dict(columns)

    @classmethod
    def wrap(cls, columns: dict[str, np.ndarray]) -> Refs:
        """A chunk over ``columns`` as given (no copy of the dict): for hot paths that build
        the dict themselves and hand it over."""
        refs = cls.__new__(cls)
        refs.columns = columns
        return refs

    @classmethod
    def of(cls, *, index, dataset=0, epoch=0, **meta) -> Refs:
        """Build a chunk from arrays or scalars (scalars are broadcast to ``len(index)``)."""
        idx = np.asarray(index, dtype=np.int64)
        n = len(idx)
        cols = {"index": idx}
        for name, value in (("dataset", dataset), ("epoch", epoch)):
            cols[name] = np.broadcast_to(np.asarray(value, dtype=_DTYPES[name]), (n,)).copy()
        for name, value in meta.items():
            cols[name] = np.broadcast_to(np.asarray(value), (n,)).copy()
        return cls(cols)

    @classmethod
    def empty(cls) -> Refs:
        """A chunk with no refs (the end-of-stream marker between plan stages)."""
        return cls({name: np.zeros(0, dtype=_DTYPES[name]) for name in REQUIRED_COLUMNS})

    @classmethod
    def concat(cls, chunks: Iterable[Refs]) -> Refs:
        """Join chunks that have the same columns."""
        chunks = [c for c in chunks if len(c)]
        if not chunks:
            return cls.empty()
        if len(chunks) == 1:
            return chunks[0]
        names = chunks[0].columns.keys()
        return cls({n: np.concatenate([c.columns[n] for c in chunks]) for n in names})

    def __len__(self) -> int:
        return len(self.columns["index"])

    def __getitem__(self, item) -> Refs:
        """Slice or gather (slice, integer array or boolean mask): a new chunk."""
        return Refs({n: c[item] for n, c in self.columns.items()})

    def __repr__(self) -> str:
        cols = ", ".join(f"{n}={c.tolist()!r}" for n, c in self.columns.items())
        return f"Refs({cols})"

    def __eq__(self, other) -> bool:
        if not isinstance(other, Refs) or self.columns.keys() != other.columns.keys():
            return NotImplemented
        return all(np.array_equal(c, other.columns[n]) for n, c in self.columns.items())

    @property
    def dataset(self) -> np.ndarray:
        return self.columns["dataset"]

    @property
    def index(self) -> np.ndarray:
        return self.columns["index"]

    @property
    def epoch(self) -> np.ndarray:
        return self.columns["epoch"]

    def column(self, name: str) -> np.ndarray:
        """One column by name; a KeyError names the columns that exist."""
        try:
            return self.columns[name]
        except KeyError:
            raise KeyError(f"no column {name!r} in refs; columns: {sorted(self.columns)}") from None

    def with_columns(self, **cols: np.ndarray) -> Refs:
        """A new chunk with columns added or replaced."""
        return Refs({**self.columns, **{n: np.asarray(c) for n, c in cols.items()}})

    def triples(self) -> list[tuple[int, int, int]]:
        """(dataset, index, epoch) per ref, as Python ints (handy in tests and tools)."""
        return list(zip(self.dataset.tolist(), self.index.tolist(), self.epoch.tolist()))


class Recipe(msgspec.Struct, frozen=True, kw_only=True):
    """What the materialize tier needs to build one batch: no payload, just references.

    ``step``: the batch number on this rank, counted from the start of the run;
    ``refs``: the samples of the batch in order; ``key``: the plan key that per-sample RNG keys
    are folded from (``fold_in(key, dataset, index, epoch)``); ``bucket``: bucket id or -1;
    ``shape``: the bucket's sample shape, ``(frames, height, width)`` for OpenSora's buckets
    (``()`` when the batch has no bucket), which the task encoder resizes and crops to.
    ``part``: in a blend or concatenation of whole datasets (:mod:`fpipe.plan.recipe_blend`),
    which of them made the recipe, so the dataset's own materializer builds it (0 otherwise).
    ``mix``: a batch mixed of several datasets' batches (:mod:`fpipe.plan.recipe_mix`): the
    recipes it is made of, each built by its own dataset's materializer; ``refs`` is then their
    refs in order (empty for a plain recipe).
    """

    step: int
    refs: Any  # Refs; typed Any because Refs is a numpy chunk, not a msgspec type
    key: Key
    bucket: int = -1
    shape: tuple[int, ...] = ()
    part: int = 0
    mix: tuple[Recipe, ...] = ()

    def __len__(self) -> int:
        return len(self.refs)
