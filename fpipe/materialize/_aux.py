"""Energon's auxiliary file stores: what a cooker of a crude dataset gets as ``**aux`` (the
metadataset's ``aux:`` entries) and as ``primary`` (``@cooker(need_primary=True)``).

Each worker opens the stores of a dataset once (:func:`aux_stores`); a store reads a file by
name and decodes it as the sample's members are decoded (by extension; the task encoder's
``decoder``, if it has one). Names are confined to the store; nothing is cached between
samples but the opened store, so every worker gives the same bytes for the same name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fpipe.materialize.lazy import FileStore as _FileStoreBase
from fpipe.materialize.lazy import NoCachePool
from fpipe.samples import decode_members, decode_whole_sample
from fpipe.samples.source_info import SourceInfo
from fpipe.storage.read.file_store import DatasetFiles, FolderFiles, StoredMediaMetadata

if TYPE_CHECKING:
    from fpipe.materialize.materializer import Materializer

__all__ = ["FileStore", "aux_stores", "cache_pool", "primary_store"]


class FileStore(_FileStoreBase[Any]):
    """Files by name (Energon's ``FileStore``): ``store[name]`` is ``(data, SourceInfo)``,
    ``store.get(name, sample)`` the data, with its source added to ``sample``'s
    ``__sources__``; ``get_path()`` the store's folder."""

    def __init__(self, files: FolderFiles | DatasetFiles, mat: Materializer):
        self._files, self._mat = files, mat
        self._stored = StoredMediaMetadata(files.root)

    def __getitem__(self, name: str) -> tuple[Any, SourceInfo]:
        data, info = self._get_raw(name)
        return self._decode_raw(data, fname=name), info

    def _get_raw(self, name: str) -> tuple[bytes, SourceInfo]:
        root = self._files.root
        if isinstance(self._files, FolderFiles):
            data, _ = self._files.read(name)
            shard = root
        else:  # as Energon records a read by name: the name, and the shard it is in
            data, index, _ext = self._files.read(name)
            shard = self._files.shard_name(index)
        return data, SourceInfo(dataset_path=root, index=name, shard_name=shard, file_names=(name,))

    def _decode_raw(self, data: Any, **kwargs: Any) -> Any:
        name = kwargs["fname"]
        if isinstance(self._files, FolderFiles):
            ext = name.rsplit("/", 1)[-1].rsplit(".", 1)[-1].lower()
        else:
            ext = name.split(".", 1)[1]
        return self._decode(name, ext, data)

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

    def get_path(self) -> str:
        return self._files.root

    def get_media_metadata(self, name: str) -> Any:
        """The ``ImageMetadata`` or ``AVMetadata`` of file ``name``: as Energon's prepare
        stored it in the store's ``.nv-meta/index.sqlite``, else computed from the file's
        bytes (the same record: it depends on the bytes only). KeyError for a file that is
        not an image or audio/video file."""
        from fpipe.decode.media_metadata import deserialize_media_metadata, media_metadata

        stored = self._stored.get(name)
        if stored is not None:
            return deserialize_media_metadata(*stored)
        data, _info = self._get_raw(name)
        meta = media_metadata(name, data)
        if meta is None:
            raise KeyError(f"{self._files.root}: {name!r} is not an image or audio/video file")
        return meta

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


def cache_pool(mat: Materializer) -> NoCachePool:
    """The pool a ``@cooker(need_cache=True)`` gets as ``cache`` (one per worker): its
    ``Lazy`` references read their file when asked, in the worker that cooked the sample."""
    pool = mat.joins.get(("aux", "cache"))
    if pool is None:
        pool = mat.joins[("aux", "cache")] = NoCachePool()
    return pool
