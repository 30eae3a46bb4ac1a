"""Folders exactly as ``energon prepare`` of megatron-energon 7.4.1 leaves them, without Energon.

Checked byte for byte against the real tool (``energon prepare DIR --non-interactive
--split-ratio 8,1,1 --sample-type CaptioningSample --field-map '{"image": "jpg", "caption":
"txt"}'``, and with ``--sample-type CrudeWebdataset`` or without ``--field-map``): the same
``.nv-meta/.info.json`` (indented JSON, no final newline), ``dataset.yaml`` (one of three
forms), ``split.yaml`` (consecutive shards collapsed into ``{00000..00007}`` brace ranges,
empty splits as ``[]``), ``index.uuid`` and ``<shard>.tar.idx``. Only ``index.sqlite`` (an
SQLite database of the sample offsets, which fpipe does not read) is not written.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import yaml

from tests.storage.helpers import make_image_caption_dataset, write_tar_idx

__all__ = ["collapse_in_order", "make_energon741_dataset"]

_NUM = re.compile(r"^(.*?)(\d+)(\D*)$")


def collapse_in_order(names: list[str]) -> list[str]:
    """Energon's ``collapse(keep_order=True)`` for the names prepare writes: runs of names that
    differ only in a last number counting up by one become ``prefix{first..last}suffix``."""
    out: list[str] = []
    run: list[tuple[str, str, str]] = []

    def flush():
        if len(run) == 1:
            out.append("".join(run[0]))
        elif run:
            out.append(f"{run[0][0]}{{{run[0][1]}..{run[-1][1]}}}{run[0][2]}")
        run.clear()

    for name in names:
        m = _NUM.match(name)
        if m is None:
            flush()
            out.append(name)
            continue
        head, num, tail = m.groups()
        prev = run[-1] if run else None
        same_run = prev and (head, tail, len(num)) == (prev[0], prev[2], len(prev[1]))
        if same_run and int(num) == int(prev[1]) + 1:
            run.append((head, num, tail))
            continue
        flush()
        run.append((head, num, tail))
    flush()
    return out


def _ratio_split(shards: list[str], ratio: tuple[float, ...]) -> dict[str, list[str]]:
    total = sum(ratio)
    parts, acc, start = {}, 0.0, 0
    for name, r in zip(("train", "val", "test"), ratio):
        acc += r / total
        end = int(len(shards) * acc)
        parts[name] = shards[start:end]
        start = end
    return parts


def make_energon741_dataset(
    root: str | Path,
    *,
    shards: int = 10,
    per_shard: int = 3,
    split_ratio: tuple[float, ...] = (8, 1, 1),
    form: str = "typed",
    exclude: list[str] | None = None,
) -> list[dict]:
    """Write image-caption shards ``parts/part-%05d.tar`` and prepare them as Energon 7.4.1.

    Args:
      form: ``"typed"`` (CaptioningSample + field_map), ``"crude"`` (CrudeWebdataset) or
        ``"sample_loader"`` (CaptioningSample with a generated ``sample_loader.py``).
      exclude: ``split.yaml`` exclude entries (Energon writes ``[]``; users add to it).

    Returns the samples as :func:`make_image_caption_dataset` does.
    """
    root = Path(root)
    expected = make_image_caption_dataset(
        root, shards=shards, per_shard=per_shard, pattern="parts/part-{:05d}.tar"
    )
    names = [f"parts/part-{s:05d}.tar" for s in range(shards)]
    for name in names:
        write_tar_idx(root / name)
    meta = root / ".nv-meta"
    meta.mkdir()
    info = {"energon_version": "7.4.1", "shard_counts": dict.fromkeys(names, per_shard)}
    (meta / ".info.json").write_text(json.dumps(info, indent=2))
    (meta / "index.uuid").write_text(str(uuid.UUID(int=len(names))))
    typed = {"__module__": "megatron.energon", "__class__": "CaptioningSample"}
    if form == "typed":
        ds = {"sample_type": typed, "field_map": {"image": "jpg", "caption": "txt"}}
    elif form == "crude":
        ds = {"__module__": "megatron.energon", "__class__": "CrudeWebdataset"}
    elif form == "sample_loader":
        ds = {
            "sample_type": typed,
            "sample_loader": "sample_loader.py:sample_loader",
            "part_filter": "sample_loader.py:part_filter",
        }
        (meta / "sample_loader.py").write_text("def sample_loader(raw: dict) -> dict: ...\n")
    else:
        raise ValueError(form)
    (meta / "dataset.yaml").write_text(yaml.dump(ds, sort_keys=False))
    parts = {k: collapse_in_order(v) for k, v in _ratio_split(names, split_ratio).items()}
    split = {"split_parts": parts, "exclude": list(exclude or [])}
    (meta / "split.yaml").write_text(yaml.dump(split, sort_keys=False))
    return expected
