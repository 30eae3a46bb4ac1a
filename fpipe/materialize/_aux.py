"""Energon's auxiliary file stores: what a cooker of a crude dataset gets as ``**aux`` (the
metadataset's ``aux:`` entries) and as ``primary`` (``@cooker(need_primary=True)``).

Each worker opens the stores of a dataset once (:func:`aux_stores`); a store reads a file by
name and decodes it as the sample's members are decoded (by extension; the task encoder's
``decoder``, if it has one). Names are confined to the store; nothing is cached between
samples but the opened store, so every worker gives the same bytes for the same name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fpipe.samples import decode_members, decode_whole_sample
from fpipe.samples.source_info import SourceInfo, add_source_info
from fpipe.storage.read.file_store import DatasetFiles, FolderFiles

if TYPE_CHECKING:
    from fpipe.materialize.materializer import Materializer

__all__ = ["FileStore", "aux_stores", "primary_store"]


class FileStore:
    """Files by name (Energon's ``FileStore``): ``store[name]`` is ``(data, SourceInfo)``,
    ``store.get(name, sample)`` the data, with its source added to ``sample``'s
    ``__sources__``; ``get_path()`` the store's folder."""

    def __init__(self, files: FolderFiles | DatasetFiles, mat: Materializer):
        self._files, self._mat = files, mat

    def __getitem__(self, name: str) -> tuple[Any, SourceInfo]:
        root = self._files.root
        if isinstance(self._files, FolderFiles):
            data, _ = self._files.read(name)
            ext, index, shard = name.rsplit("/", 1)[-1].rsplit(".", 1)[-1].lower(), name, root
        else:
            data, index, ext = self._files.read(name)
            shard = root
        return self._decode(name, ext, data), SourceInfo(
            dataset_path=root, index=index, shard_name=shard, file_names=(name,)
        )

    def _decode(self, name: str, ext: str, data: bytes) -> Any:
        mat = self._mat
        if mat.sample_decoder is not None:
            out = decode_whole_sample(mat.sample_decoder, {ext: data}, self._files.root, name)
            return out.get(ext, data)
        return decode_members(
            {ext: data},
            path=self._files.root,
            key=name,
            image_options=mat.image_decode,
            limits=mat.decode_limits,
        )[ext]

    def get(self, name: str, sample: Any = None) -> Any:
        data, info = self[name]
        if sample is not None:
            add_source_info(sample, info)
        return data

    def get_path(self) -> str:
        return self._files.root

    def __repr__(self) -> str:
        return f"FileStore({self._files.root!r})"


def aux_stores(mat: Materializer, aux: tuple) -> dict[str, FileStore]:
    """The stores of a dataset's ``aux`` records (:class:`~fpipe.storage.config.AuxRef`),
    opened once per worker."""
    out = {}
    for ref in aux:
        store = mat.joins.get(("aux", ref.kind, ref.path))
        if store is None:
            files = FolderFiles(ref.path) if ref.kind == "filesystem" else DatasetFiles(ref.path)
            store = mat.joins[("aux", ref.kind, ref.path)] = FileStore(files, mat)
        out[ref.name] = store
    return out


def primary_store(mat: Materializer, path: str) -> FileStore:
    """The sample's own dataset as a store (a cooker's ``primary``), opened once per worker."""
    store = mat.joins.get(("aux", "dataset", path))
    if store is None:
        store = mat.joins[("aux", "dataset", path)] = FileStore(DatasetFiles(path), mat)
    return store
