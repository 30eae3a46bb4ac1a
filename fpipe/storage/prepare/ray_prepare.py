"""Prepare on a Ray cluster: the shard slices of ``prepare_dataset(part=...)`` as Ray tasks,
then their merge (``fpipe prepare DIR --ray``).

Each task indexes one slice of the shards (:func:`prepare_dataset` with ``part=(i, n)``) on
whichever node Ray places it, and writes its part next to the dataset, so the folder must be
on a file system every node sees (NFS, Lustre, a FUSE mount of a bucket). When every part is
written, this process merges them: the index is the one a single-process prepare writes (the
parts are slices of the same sorted shard list, merged in order).

A run that is stopped (the driver killed, a node lost) resumes when started again: each task
takes the shards its part's journal, or any other part's, recorded unchanged from there and
reads only the rest (:mod:`.journal`); parts of a stopped run with another number of parts
are removed first.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from fpipe.core.errors import ConfigError
from fpipe.storage.paths import is_url
from fpipe.storage.prepare.run import PARTS_DIR, PrepareReport, prepare_dataset

__all__ = ["prepare_on_ray"]


def _prepare_part(path: str, part: tuple[int, int], options: dict) -> PrepareReport:
    """One Ray task: index slice ``part`` of the shards (run on a cluster node)."""
    return prepare_dataset(path, part=part, progress=False, **options)


def prepare_on_ray(
    path: str | os.PathLike,
    *,
    parts: int | None = None,
    num_cpus: float = 1,
    address: str | None = None,
    **options: Any,
) -> PrepareReport:
    """Index the dataset folder ``path`` with ``parts`` Ray tasks, then merge their parts.

    Args:
      path: a dataset folder on a file system every node of the cluster sees.
      parts: shard slices, one Ray task each (default: the cluster's CPUs).
      num_cpus: CPUs Ray reserves per task.
      address: ``ray.init(address=...)`` when this process has not called ``ray.init``
        (None: Ray's default, a running local cluster or ``RAY_ADDRESS``, else a new one).
      **options: :func:`prepare_dataset`'s (``fields``, ``split``, ``columns``...), given to
        every part and to the merge; not ``part`` or ``merge``.

    Returns:
      The merge's :class:`PrepareReport` (every shard; the parts' problems are in its
      problems file as after ``part`` runs and a ``merge``).
    """
    if is_url(path):
        raise ConfigError(
            f"{path}: prepare on Ray writes parts next to the dataset and needs a folder on a "
            "shared file system; for object storage use prepare_dataset(url, workers=N)"
        )
    if "part" in options or "merge" in options:
        raise ConfigError("prepare_on_ray makes the parts and merges them: drop part= / merge=")
    ray = _connect(address)
    if parts is None:
        parts = max(1, int(ray.cluster_resources().get("CPU", 1)))
    _drop_other_parts(Path(path), parts)
    task = ray.remote(_prepare_part).options(num_cpus=num_cpus, max_retries=1)
    root = str(Path(path).resolve())
    part_options = {k: v for k, v in options.items() if k != "progress"}
    ray.get([task.remote(root, (i, parts), part_options) for i in range(parts)])
    return prepare_dataset(root, merge=True, **options)


def _drop_other_parts(root: Path, parts: int) -> None:
    """Remove parts left by a stopped run with another number of parts (a merge takes the
    parts of one run). Their shards' scans stay in the parts' journal, so this run's tasks
    do not read those shards again (:mod:`.journal`)."""
    for d in (root / PARTS_DIR).glob("part-*-of-*"):
        if d.is_dir() and not d.name.endswith(f"-of-{parts}"):
            shutil.rmtree(d)


def _connect(address: str | None):
    try:
        import ray
    except ImportError as err:
        raise ConfigError('prepare on Ray needs Ray: pip install "fpipe[ray]"') from err
    if not ray.is_initialized():
        ray.init(address=address)
    return ray
