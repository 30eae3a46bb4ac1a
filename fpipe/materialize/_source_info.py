"""The ``__sources__`` of a sample read from a dataset: one :class:`fpipe.samples.SourceInfo`.

Its dataset's path, its index, its shard (the tar file, relative to the dataset; "" for a
table's rows) and the names of the files it was read from (``000123.jpg`` inside the shard; a
table's columns). With the shard name these give fpipe's full key (``parts/data-0/000123``)
also where ``__key__`` is Energon's key inside the shard.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fpipe.samples import SourceInfo
from fpipe.storage.read.webdataset import shard_stem

__all__ = ["failed_sources", "sample_sources"]


def sample_sources(
    ds: Any,
    path: str,
    index: int,
    key: str,
    raw: Mapping[str, Any],
    wanted: frozenset[str] | None = None,
) -> tuple:
    """``(SourceInfo,)`` of sample ``index`` of ``ds`` (at ``path``), whose fpipe key is
    ``key`` and whose members are ``raw`` (member extension -> bytes, as read); ``wanted``:
    the members the sample is made of (None: all; a field map's members, as Energon's part
    filter takes them)."""
    members = [m for m in raw if not m.startswith("__") and (wanted is None or m in wanted)]
    record = getattr(ds, "record", None)
    shards = getattr(record, "shards", None) or ()
    shard, files = "", tuple(members)
    if shards:
        shard = shards[int(ds.column("shard_id")[index])].name
        stem = shard_stem(shard)
        inner = key[len(stem) + 1 :] if key.startswith(stem + "/") else key
        files = tuple(f"{inner}.{m}" for m in members)
    return (SourceInfo(dataset_path=path, index=int(index), shard_name=shard, file_names=files),)


def failed_sources(m: Any, d: int, index: int) -> list | None:
    """The sources of sample ``index`` of dataset ``d`` of materializer ``m`` that failed,
    for an error handler: its dataset, index and shard (no file names: it may not have been
    read); None if even that cannot be told. Never raises."""
    try:
        ds = m.dataset(d)
        key = str(ds.key(index))
        path = str(getattr(ds, "path", m.sources[d].path))
        return list(sample_sources(ds, path, index, key, {}))
    except Exception:  # noqa: BLE001 - only used to describe a failed sample to a handler
        return None
