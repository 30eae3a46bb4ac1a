"""The index of a dataset on object storage, kept in a local folder.

The index (``info.yaml``, ``dataset.yaml``, ``split.yaml`` and the ``.npy`` arrays) is small
next to the shards and is memory-mapped like a local one, so it lives on local disk:

- ``index_dir`` given: that folder holds the index (``fpipe prepare URL --index-dir DIR``
  wrote it there); nothing is read from the bucket but shards.
- otherwise the index is the bucket's ``URL/.fpipe/``, copied into
  ``$FPIPE_CACHE`` (default ``~/.cache/fpipe``) under a folder named by the URL's hash. Each
  open reads ``info.yaml`` (one small GET) and copies the rest again only when it changed, so a
  dataset prepared anew is never read through a stale index.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from fpipe.core.errors import ConfigError
from fpipe.core.temp_names import beside
from fpipe.storage.paths import expand_braces, join_url
from fpipe.storage.read.remote import (
    StorageOptions,
    list_objects,
    read_object,
    write_object,
)
from fpipe.storage.read.tar.index import INDEX_DIR
from fpipe.storage.read.webdataset import SHARD_SUFFIXES, is_gzip_shard

__all__ = ["cached_copy", "local_index", "matching_objects", "remote_shards", "upload_index"]


def _cache_root() -> Path:
    """Where copies of remote indexes live (``$FPIPE_CACHE`` or ``~/.cache/fpipe``)."""
    return Path(os.environ.get("FPIPE_CACHE") or Path.home() / ".cache" / "fpipe")


def local_index(url: str, index_dir, options: StorageOptions) -> Path:
    """Local folder holding the index of the dataset at ``url`` (see the module docstring)."""
    if index_dir is not None:
        d = Path(index_dir)
        if not (d / "info.yaml").exists():
            raise ConfigError(
                f"{d}: no info.yaml; prepare the dataset with `fpipe prepare {url} --index-dir {d}`"
            )
        return d
    base = join_url(url, INDEX_DIR)
    try:
        info = read_object(join_url(base, "info.yaml"), options)
    except FileNotFoundError:
        raise ConfigError(
            f"{url}: no {INDEX_DIR}/info.yaml in the bucket; run `fpipe prepare {url}` (or pass "
            "index_dir= a local index)"
        ) from None
    except OSError as e:
        raise ConfigError(f"{url}: cannot read the index: {e}") from None

    def copy(tmp: Path) -> None:
        for rel, _size in list_objects(base, options):
            if rel == "info.yaml":
                continue
            dst = tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(read_object(join_url(base, rel), options))
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "info.yaml").write_bytes(info)  # written last: a copy with info.yaml is whole

    return cached_copy("index", url, "info.yaml", info, copy)


def cached_copy(
    kind: str, url: str, marker: str, current: bytes, copy: Callable[[Path], None]
) -> Path:
    """The local copy of the index of the dataset at ``url``, in
    ``$FPIPE_CACHE/<kind>/<hash of the URL>``: kept while its file ``marker`` holds
    ``current`` (that file as the bucket has it now), else made anew by ``copy(folder)`` in a
    folder of this thread's and swapped in whole, so no reader sees half a copy."""
    d = _cache_root() / kind / hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:24]
    if (d / marker).exists() and (d / marker).read_bytes() == current:
        return d
    # a folder per thread: two making the same copy at once would otherwise empty each other's
    tmp = beside(d)
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        copy(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(d, ignore_errors=True)
    try:
        os.replace(tmp, d)
    except OSError:  # another process finished the same copy first
        shutil.rmtree(tmp, ignore_errors=True)
    return d


def upload_index(local: Path, url: str, options: StorageOptions) -> str:
    """Copy the index folder ``local`` to ``URL/.fpipe/`` (``info.yaml`` last); its URL."""
    base = join_url(url, INDEX_DIR)
    files = sorted(p for p in local.rglob("*") if p.is_file() and p.name != "info.yaml")
    for p in [*files, local / "info.yaml"]:
        write_object(join_url(base, p.relative_to(local).as_posix()), p.read_bytes(), options)
    return base


def matching_objects(
    url: str, suffixes: str | tuple[str, ...], patterns, options: StorageOptions | None
) -> list[str]:
    """Names of the objects under ``url`` that end with ``suffixes`` (none inside a hidden
    folder), kept where they match one of ``patterns`` (globs with brace expansion, as for
    local folders) if any are given; sorted."""
    names = sorted(
        rel
        for rel, _ in list_objects(url, options)
        if rel.endswith(suffixes) and not any(p.startswith(".") for p in rel.split("/"))
    )
    if patterns:
        wanted = [p for pat in patterns for p in expand_braces(pat)]
        names = [n for n in names if any(fnmatch.fnmatchcase(n, w) for w in wanted)]
    return names


def remote_shards(url: str, patterns, options: StorageOptions | None) -> list[str]:
    """Shard names under ``url`` (all ``.tar`` objects, or those matching ``patterns``: globs
    with brace expansion, as for local folders), sorted. Gzip shards are refused: a bucket
    offers no place for the decompressed copy that random access needs."""
    names = matching_objects(url, SHARD_SUFFIXES, patterns, options)
    gz = [n for n in names if is_gzip_shard(n)]
    if gz:
        raise ConfigError(
            f"{url}: shard {gz[0]!r} is gzip-compressed; fpipe reads shards in a bucket by byte "
            "ranges, which compressed shards do not allow. Re-shard without compression, or copy "
            "the dataset to a local disk and prepare it there"
        )
    if not names:
        raise ConfigError(f"{url}: no .tar shards found")
    return names
