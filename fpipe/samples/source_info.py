"""Where a sample came from: :class:`SourceInfo` records in the ``__sources__`` of samples.

Each sample the loader reads carries one record per file it was read from (a joined sample one
per dataset of the join): the dataset's path, the sample's index in it, the shard and the
names of the shard's files that made the sample, as Energon's ``SourceInfo``. On a folder
written by ``energon prepare``, where ``__key__`` is the key inside the shard (``000123``), the
shard name and file names (``parts/data-0.tar``, ``000123.jpg``) tell fpipe's longer key
(``parts/data-0/000123``). Records are frozen and compare by value; batches carry their
samples' records (a :class:`~fpipe.samples.Batch` flattens them into one tuple).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["SourceInfo", "add_source_info", "get_source_info"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceInfo:
    """Where one sample was read from (Energon's ``SourceInfo``).

    Examples:
      >>> s = SourceInfo(dataset_path="/data/coco", index=7, shard_name="parts/data-0.tar",
      ...                file_names=("000007.jpg", "000007.txt"))
      >>> s.shard_name, s.file_names[0]
      ('parts/data-0.tar', '000007.jpg')
    """

    #: The path (or URL) of the dataset.
    dataset_path: str
    #: The index of the sample in the dataset.
    index: str | int
    #: The name of the shard (tar file) relative to the dataset; "" for a table's rows.
    shard_name: str
    #: The names of the files in the shard that made the sample (a table: its columns).
    file_names: tuple[str, ...]

    def __reduce__(self):
        # A batch's records travel with it from a worker process or a Ray actor; a frozen
        # dataclass with slots pickles its state through ``dataclasses.fields`` (~15 us each,
        # half a millisecond for a batch of 32), its fields as arguments cost a tenth of that.
        return _source_info, (self.dataset_path, self.index, self.shard_name, self.file_names)


def _source_info(dataset_path: str, index: str | int, shard_name: str, file_names: tuple):
    return SourceInfo(
        dataset_path=dataset_path, index=index, shard_name=shard_name, file_names=file_names
    )


def add_source_info(sample: Any, *source_infos: SourceInfo) -> Any:
    """``sample`` with ``source_infos`` appended to its ``__sources__`` (Energon's helper): a
    sample (or any object with ``__sources__``) or a dict is changed in place and returned."""
    if isinstance(sample, dict):
        sample["__sources__"] = (*(sample.get("__sources__") or ()), *source_infos)
    elif hasattr(sample, "__sources__"):
        sample.__sources__ = (*(sample.__sources__ or ()), *source_infos)
    return sample


def get_source_info(sample: Any) -> list[SourceInfo] | None:
    """The ``__sources__`` of a sample, a dict sample, or a list of them (flattened); None
    when there are none (Energon's helper)."""
    if isinstance(sample, list):
        sources = [src for s in sample for src in (get_source_info(s) or ())]
    elif isinstance(sample, Mapping):
        sources = list(sample.get("__sources__") or ())
    else:
        sources = list(getattr(sample, "__sources__", None) or ())
    return sources or None
