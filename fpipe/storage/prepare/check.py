"""``fpipe check``: verify every member of a dataset against its index, in one full pass.

Opening already checks the index record, the array shapes and that the shards are unchanged
(size and mtime); this reads everything: for the ``"tar"`` layout it walks every shard's tar
headers and compares each indexed sample's members (extension, offset, size) with the shard,
then reads every sample through the dataset (bounds, gzip members). Other layouts read every
sample. Problems are collected with the shard and the sample key, never raised one by one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from fpipe.core.errors import BadSampleError, FpipeError
from fpipe.storage.paths import PathEscapeError
from fpipe.storage.prepare._progress import progress_bar
from fpipe.storage.read.dataset import Dataset
from fpipe.storage.read.layouts import open_dataset
from fpipe.storage.read.webdataset import ShardError, iter_samples, open_shard, shard_stem

__all__ = ["CheckReport", "check_dataset"]


class CheckReport(msgspec.Struct, frozen=True):
    """What :func:`check_dataset` found."""

    path: str  #: the dataset
    samples: int  #: samples checked
    shards: int  #: shards walked
    problems: tuple[tuple[str, str, str], ...]  #: (shard or file, sample key, what is wrong)

    @property
    def ok(self) -> bool:
        """No problem found."""
        return not self.problems


def _walk(root: str, name: str, storage) -> tuple[dict[str, set], str | None]:
    """Members of every sample of one shard, ``{key: {(ext, offset, size)}}``, and the error
    that stopped the walk (None when the shard was read to its end)."""
    found: dict[str, set] = {}
    try:
        f, size = open_shard(root, name, storage)
        with f:
            for key, exts, offs, sizes, _ in iter_samples(f, size, lambda ext: 0):
                found[key] = set(zip(exts, offs, sizes))
    except ShardError as e:
        return found, f"{e.reason}" + (f" (at sample {e.key!r})" if e.key else "")
    except (OSError, EOFError) as e:
        return found, f"unreadable: {e}"
    except PathEscapeError as e:  # never opened
        return found, e.reason
    return found, None


def _check_tar(ds: Dataset, problems: list, bar) -> None:
    record = ds.record
    starts = record.shard_starts()
    for sid, shard in enumerate(record.shards):
        found, error = _walk(ds.path, shard.name, ds._open_args.get("storage"))
        if error is not None:
            problems.append((shard.name, "", error))
        stem = shard_stem(shard.name) + "/"
        for i in range(int(starts[sid]), int(starts[sid + 1])):
            key = ds.key(i)
            local = key[len(stem) :] if key.startswith(stem) else key
            try:
                want = set(ds.reader.members(i))
            except BadSampleError as e:
                problems.append((shard.name, key, e.reason))
                continue
            have = found.get(local)
            if have is None:
                problems.append((shard.name, key, "indexed sample not found in the shard"))
            elif want != have:
                diff = sorted(want ^ have)[:4]
                problems.append(
                    (shard.name, key, f"members differ from the index (ext, offset, size): {diff}")
                )
        bar.update(1)


def check_dataset(
    path: str | Path, *, progress: bool = True, media_root: Any = None
) -> CheckReport:
    """Verify every member of the dataset at ``path`` against its index (see module doc).
    ``media_root``: as :func:`~fpipe.storage.open_dataset`'s, for a prepared table whose
    media folder lies outside its folder.

    Raises:
      ConfigError: the dataset cannot be opened (a malformed or stale index).
    """
    ds = open_dataset(path, **({"media_root": media_root} if media_root else {}))
    problems: list[tuple[str, str, str]] = []
    shards = len(ds.record.shards)
    if ds.layout == "tar":
        bar = progress_bar(shards, "check shards", enabled=progress)
        _check_tar(ds, problems, bar)
        bar.close()
    bar = progress_bar(len(ds), "read samples", unit="sample", enabled=progress)
    for i in range(len(ds)):
        try:
            ds.read(i)
        except FpipeError as e:
            problems.append((getattr(e, "path", "") or str(path), ds.key(i), str(e)))
        bar.update(1)
    bar.close()
    return CheckReport(str(path), len(ds), shards, tuple(problems))
