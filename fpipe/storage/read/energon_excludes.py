"""Energon's ``exclude`` entries of ``split.yaml`` as sample keys.

Energon names an excluded sample ``"<shard>/<index in the shard>"``; fpipe's own index may
leave bad samples out, so such an index would point at another sample there, while a key does
not move. :func:`exclude_to_keys` reads the keys through the ``.tar.idx`` offsets,
:func:`exclude_to_keys_by_walk` by walking the tar headers of the shards an entry names.
"""

from __future__ import annotations

from pathlib import Path

from fpipe.core.errors import BadSampleError, ConfigError
from fpipe.storage.config.dataset_yaml import SplitConfig
from fpipe.storage.read.energon_meta import EnergonMeta, energon_arrays, energon_record
from fpipe.storage.read.energon_reader import EnergonReader
from fpipe.storage.read.reader import FileCache
from fpipe.storage.read.record import ArrayStore
from fpipe.storage.read.webdataset import ShardError, iter_samples, open_shard, shard_stem

__all__ = ["exclude_to_keys", "exclude_to_keys_by_walk"]


def exclude_to_keys(root: str | Path, meta: EnergonMeta) -> list[str]:
    """Energon ``exclude`` entries with sample indices rewritten as sample keys
    (``"<shard>/<key in the shard>"``, as Energon reads it, becomes that key; a number that is
    no key of the shard is read as an index in it).

    fpipe's own index may leave bad samples out, so Energon's per-shard indices would point
    at other samples there; keys do not move.
    """
    if meta.split is None:
        return []
    record = energon_record(meta)
    reader = None
    starts = record.shard_starts()
    names = record.shard_names
    out = []
    for entry in meta.split.exclude:
        head, _, tail = entry.rpartition("/")
        if head in meta.shard_counts and tail.isdigit():
            if reader is None:
                arrays = ArrayStore(make=energon_arrays(str(root), record))
                reader = EnergonReader(str(root), record, arrays, FileCache(4))
            try:
                start = int(starts[names.index(head)])
                shard_keys = [reader.key(start + i) for i in range(meta.shard_counts[head])]
                key = f"{shard_stem(head)}/{tail}"
                j = int(tail)
                if key in shard_keys:  # Energon reads the entry as a key of the shard
                    out.append(key)
                elif j < len(shard_keys):
                    out.append(shard_keys[j])
                else:
                    raise IndexError(j)
            except (BadSampleError, IndexError, ConfigError):
                out.append(entry)
        else:
            out.append(entry)
    return out


def _walk_keys(root: str | Path, name: str) -> list[str]:
    """Sample keys of shard ``name`` in tar order (headers only), as Energon counts them."""
    f, size = open_shard(str(root), name)
    with f:
        return [f"{shard_stem(name)}/{key}" for key, *_ in iter_samples(f, size, lambda e: 0)]


def exclude_to_keys_by_walk(
    root: str | Path, split: SplitConfig | None, shards: list[str]
) -> list[str]:
    """:func:`exclude_to_keys` for a ``.nv-meta`` without ``.info.yaml`` and ``.tar.idx``
    files: a ``"<shard>/<index>"`` entry becomes the key of that sample, found by walking the
    shard's tar headers (only shards such an entry names are walked)."""
    if split is None:
        return []
    known = set(shards)
    keys: dict[str, list[str]] = {}
    out = []
    for entry in split.exclude:
        head, _, tail = entry.rpartition("/")
        if head in known and tail.isdigit():
            if head not in keys:
                try:
                    keys[head] = _walk_keys(root, head)
                except (OSError, ShardError, ConfigError):  # ConfigError: leads out, unopened
                    keys[head] = []
            j, key = int(tail), f"{shard_stem(head)}/{tail}"
            if key in keys[head]:  # Energon reads the entry as a key of the shard
                out.append(key)
            else:
                out.append(keys[head][j] if j < len(keys[head]) else entry)
        else:
            out.append(entry)
    return out
