"""Megatron-Energon datasets: the ``"energon"`` layout, read as ``energon prepare`` wrote it.

What is read (see ``docs/energon_migration.md``):

- ``.nv-meta/dataset.yaml``: ``sample_type`` (``__class__`` name), ``field_map``,
  ``subflavors``; ``sample_loader`` / ``part_filter`` are recorded, never executed; a crude
  dataset (``__class__: CrudeWebdataset``) has no sample type;
- ``.nv-meta/split.yaml``: ``split_parts`` (shard names, brace ranges such as
  ``part-{00000..00007}.tar`` expanded) and ``exclude``;
- ``.nv-meta/.info.yaml`` (or ``.info.json``): ``shard_counts`` (shard name -> samples);
- ``<shard>.tar.idx`` next to each shard: little-endian uint64 byte offsets of the first tar
  header of every sample, plus one final offset (the end of the last sample).

Nothing under ``.nv-meta`` or next to the shards is written.

The layout's parts are modules of their own: :mod:`fpipe.storage.read.energon_meta` (reading
``.nv-meta``), :mod:`fpipe.storage.read.energon_reader` (reading samples) and
:mod:`fpipe.storage.read.energon_excludes` (``exclude`` entries as keys); their names are
importable from here.
"""

from __future__ import annotations

from fpipe.storage.read.energon_excludes import exclude_to_keys, exclude_to_keys_by_walk
from fpipe.storage.read.energon_meta import (
    IDX_SUFFIX,
    META_DIR,
    EnergonMeta,
    energon_arrays,
    energon_record,
    has_shard_counts,
    is_energon,
    read_energon_meta,
    read_energon_yaml,
    walk_energon_meta,
)
from fpipe.storage.read.energon_reader import EnergonReader, LinkMember, parse_sample

__all__ = [
    "EnergonMeta",
    "EnergonReader",
    "IDX_SUFFIX",
    "LinkMember",
    "META_DIR",
    "energon_arrays",
    "energon_record",
    "exclude_to_keys",
    "exclude_to_keys_by_walk",
    "has_shard_counts",
    "is_energon",
    "parse_sample",
    "read_energon_meta",
    "read_energon_yaml",
    "walk_energon_meta",
]
