"""Small WebDataset shards with plain members (``txt``, ``cls``, ``json``, ``jpg``), and the
``.nv-meta`` that ``energon prepare`` writes for them, for the tests of Energon's data.

``write_plain_shards`` writes the shards only (the comparison with Energon runs the real
``energon prepare`` on them); ``make_plain_energon_folder`` adds ``.nv-meta`` as Energon 7.4 does
(``.info.json``, ``split.yaml``, ``dataset.yaml`` and the ``.tar.idx`` offsets), without Energon.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.storage.helpers import jpeg_bytes, write_tar, write_tar_idx

__all__ = ["make_plain_energon_folder", "plain_sample", "write_plain_shards"]


def plain_sample(i: int) -> dict[str, bytes]:
    """The members of sample ``i``: text that looks like a number, an integer class, a JSON
    object of numbers and a small JPEG."""
    return {
        "txt": f"{i + 10}".encode(),
        "cls": f"{i % 3}".encode(),
        "json": json.dumps({"n": i, "f": i / 2}).encode(),
        "jpg": jpeg_bytes(8, 6),
    }


def write_plain_shards(root: str | Path, *, shards: int = 2, per_shard: int = 3) -> list[str]:
    """``parts/data-<s>.tar`` under ``root``, keys ``000000``..., in order; returns the shard
    names."""
    root = Path(root)
    names = []
    for s in range(shards):
        name = f"parts/data-{s}.tar"
        keys = range(s * per_shard, (s + 1) * per_shard)
        write_tar(root / name, [(f"{i:06d}", plain_sample(i)) for i in keys])
        names.append(name)
    return names


def make_plain_energon_folder(
    root: str | Path, dataset_yaml: dict, *, shards: int = 2, per_shard: int = 3
) -> Path:
    """Plain shards plus ``.nv-meta`` as ``energon prepare --split-ratio 1,0,0`` writes it."""
    root = Path(root)
    names = write_plain_shards(root, shards=shards, per_shard=per_shard)
    for name in names:
        write_tar_idx(root / name)
    meta = root / ".nv-meta"
    meta.mkdir(parents=True)
    info = {"energon_version": "7.4.0", "shard_counts": dict.fromkeys(names, per_shard)}
    (meta / ".info.json").write_text(json.dumps(info, indent=2))
    split = {"split_parts": {"train": names, "val": [], "test": []}, "exclude": []}
    (meta / "split.yaml").write_text(yaml.dump(split, sort_keys=False))
    (meta / "dataset.yaml").write_text(yaml.dump(dataset_yaml, sort_keys=False))
    return root


#: dataset.yaml of a crude dataset, as Energon writes it
CRUDE_CONFIG = {"__module__": "megatron.energon", "__class__": "CrudeWebdataset"}
#: dataset.yaml of a text dataset (its .txt member as the text), as Energon writes it
TEXT_CONFIG = {
    "sample_type": {"__module__": "megatron.energon", "__class__": "TextSample"},
    "field_map": {"text": "txt"},
}
