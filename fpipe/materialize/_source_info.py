"""The ``__sources__`` of a sample read from a dataset: one :class:`fpipe.samples.SourceInfo`.

Its dataset's path, its index, its shard (the tar file, relative to the dataset; "" for a
table's rows) and the names of the files it was read from (``000123.jpg`` inside the shard; a
table's columns). With the shard name these give fpipe's full key (``parts/data-0/000123``)
also where ``__key__`` is Energon's key inside the shard. :class:`ShardNames` also gives a
sample of an Energon folder that key and its ``__shard__``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fpipe.samples import SourceInfo
from fpipe.storage.read.webdataset import shard_stem

__all__ = ["ShardNames", "failed_sources"]


class ShardNames:
    """How the samples of one opened dataset (at ``path``) are named by their shard: its
    shard table and each shard's stem, looked up once (per process, by the materializer)
    rather than for every sample. ``energon``: an Energon folder, whose samples carry the key
    inside their shard as ``__key__`` and the shard's name as ``__shard__``."""

    def __init__(self, ds: Any, path: str):
        record = getattr(ds, "record", None)
        self.path = path
        self._shards = getattr(record, "shards", None) or ()
        self._shard_ids = ds.column("shard_id") if self._shards else None
        self._named: dict[int, tuple[str, str]] = {}  # shard id -> (name, its stem + "/")
        #: sample index -> shard id of the samples being read (:meth:`remember`)
        self._sid_of: dict[int, int] = {}
        self.energon = bool(self._shards) and str(record.source).endswith("energon")

    def locate(
        self,
        index: int,
        key: str,
        raw: Mapping[str, Any],
        wanted: frozenset[str] | None = None,
    ) -> tuple[str, str, tuple]:
        """``(shard, inner, sources)`` of sample ``index`` whose fpipe key is ``key`` and whose
        members are ``raw`` (member extension -> bytes, as read): its shard's name and its key
        inside the shard (``"parts/data-0.tar"``, ``"000123"`` for ``parts/data-0/000123``; a
        table's rows: ``""`` and ``key``), and its ``__sources__``, ``(SourceInfo,)``.
        ``wanted``: the members the sample is made of (None: all; a field map's members, as
        Energon's part filter takes them)."""
        sid = self._sid_of.get(index, -1)
        if sid < 0 and self._shards:
            sid = self._shard_ids.item(index)  # type: ignore[union-attr]  # set with the shards
        # The loader calls this for every sample: a loop rather than a comprehension (no
        # function object and frame each time), and the record built from its slots (below).
        files = []
        if self._shards:
            named = self._named.get(sid)
            if named is None:
                name = self._shards[sid].name
                named = self._named[sid] = (name, shard_stem(name) + "/")
            shard, prefix = named
            inner = key[len(prefix) :] if key.startswith(prefix) else key
            for m in raw:
                if not m.startswith("__") and (wanted is None or m in wanted):
                    files.append(f"{inner}.{m}")
        else:
            shard, inner = "", key
            for m in raw:
                if not m.startswith("__") and (wanted is None or m in wanted):
                    files.append(m)
        info = _new_record(SourceInfo)
        _set_dataset_path(info, self.path)
        _set_index(info, int(index))
        _set_shard_name(info, shard)
        _set_file_names(info, tuple(files))
        return shard, inner, (info,)

    def remember(self, indices: np.ndarray) -> None:
        """Look up the shard ids of samples ``indices`` at once, for :meth:`locate` of each
        (a compact index derives a sample's shard id: one lookup for a batch costs about
        what one for a sample does); the ids remembered before are forgotten."""
        if self._shards:
            sids = np.asarray(self._shard_ids[indices]).tolist()  # type: ignore[index]
            self._sid_of = dict(zip(indices.tolist(), sids))


# SourceInfo(dataset_path=..., ...) without its call: a frozen dataclass is built through its
# class with keywords and each field set by object.__setattr__, which costs more than all the
# rest of locate(); its slots' own setters give the same record (ShardNames is tested against
# SourceInfo(...), field by field).
_new_record = object.__new__
_set_dataset_path, _set_index, _set_shard_name, _set_file_names = (
    getattr(SourceInfo, name).__set__
    for name in ("dataset_path", "index", "shard_name", "file_names")
)


def failed_sources(m: Any, d: int, index: int) -> list | None:
    """The sources of sample ``index`` of dataset ``d`` of materializer ``m`` that failed,
    for an error handler: its dataset, index and shard (no file names: it may not have been
    read); None if even that cannot be told. Never raises."""
    try:
        ds = m.dataset(d)
        key = str(ds.key(index))
        names = ShardNames(ds, str(getattr(ds, "path", m.sources[d].path)))
        return list(names.locate(index, key, {})[2])
    except Exception:  # noqa: BLE001 - only used to describe a failed sample to a handler
        return None
