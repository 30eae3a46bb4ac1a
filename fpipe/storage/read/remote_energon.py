"""An Energon dataset (``.nv-meta/`` and ``<shard>.tar.idx`` files) on object storage.

``energon prepare`` writes the index of a dataset next to its shards: ``.nv-meta/`` (its
``dataset.yaml``, ``split.yaml`` and the shard counts in ``.info.yaml``) and one ``.tar.idx``
(each sample's byte offset) per shard. These are small next to the shards, so, as for fpipe's
own index (:mod:`~fpipe.storage.read.remote_index`), they are copied once into
``$FPIPE_CACHE/energon/<hash of the URL>`` and read from there; each open reads the shard
counts (one small GET) and copies the rest again only when they changed. The shards stay in
the bucket and are read one ranged GET per sample.

The shard names ``.info.yaml`` lists are data: each must stay under the dataset's URL (no
``..``, not absolute; :func:`~fpipe.storage.paths.contained`), checked before any ``.tar.idx``
is fetched; object names from the listing are confined to the local copy the same way.
"""

from __future__ import annotations

from pathlib import Path

from fpipe.core.errors import ConfigError
from fpipe.storage.paths import contained, join_url
from fpipe.storage.read._validate import check_record
from fpipe.storage.read.energon import IDX_SUFFIX, META_DIR, energon_record, read_energon_meta
from fpipe.storage.read.remote import StorageOptions, list_objects, read_object
from fpipe.storage.read.remote_index import cached_copy

__all__ = ["energon_index"]

_INFO_NAMES = (".info.yaml", ".info.json")


def energon_index(url: str, options: StorageOptions) -> Path | None:
    """The local folder holding a copy of the Energon index of the dataset at ``url``
    (``.nv-meta/`` and the ``.tar.idx`` files at their shards' names), or None when ``url``
    has no ``.nv-meta/``.

    Raises:
      ConfigError: a ``.nv-meta/`` without ``.info.yaml``, an index that cannot be read, or a
        shard name leading out of ``url``.
    """
    base = join_url(url, META_DIR)
    try:
        names = dict(list_objects(base, options))
    except OSError as e:
        raise ConfigError(f"{url}: cannot list {META_DIR}/: {e}") from None
    info = next((n for n in _INFO_NAMES if n in names), None)
    if info is None:
        if not names:
            return None
        raise ConfigError(
            f"{base}: holds {sorted(names)} but no .info.yaml; a dataset on object storage is "
            "read through the shard counts and .tar.idx files `energon prepare` writes: run it "
            f"(or `fpipe prepare {url}`)"
        )
    try:
        info_bytes = read_object(join_url(base, info), options)
    except OSError as e:
        raise ConfigError(f"{base}/{info}: cannot read: {e}") from None
    return cached_copy(
        "energon",
        url,
        f"{META_DIR}/{info}",
        info_bytes,
        lambda tmp: _copy(url, base, names, info, info_bytes, tmp, options),
    )


def _copy(url, base, names, info, info_bytes, tmp: Path, options) -> None:
    meta = tmp / META_DIR
    where = f"{base}/"
    for rel in sorted(names):
        if rel == info:
            continue
        dst = Path(contained(meta, rel, where=where, what="object name"))
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(read_object(join_url(base, rel), options))
    meta.mkdir(parents=True, exist_ok=True)
    (meta / info).write_bytes(info_bytes)
    record = energon_record(read_energon_meta(tmp))
    check_record(url, record, f"{base}/{info}")  # every shard name stays under the URL
    for s in record.shards:
        src = contained(url, s.name + IDX_SUFFIX, where=f"{base}/{info}", what="shard path")
        dst = Path(contained(tmp, s.name + IDX_SUFFIX, where=f"{base}/{info}", what="shard path"))
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            dst.write_bytes(read_object(src, options))
        except OSError as e:
            raise ConfigError(f"{src}: cannot read Energon tar index: {e}") from None
