"""Megatron indexed corpora as fpipe datasets: the ``"megatron"`` layout.

A corpus prefix (``data/wiki_text_document`` for ``wiki_text_document.idx`` / ``.bin``), one
of its two files, a local folder holding prefixes, or the URL of a prefix on object storage
opens as a dataset with no ``fpipe prepare``: every prefix is one of its shards (in sorted
order), and a sample is one *document* of a prefix (``sample_unit="document"``, the default)
or one *sequence* (``sample_unit="sequence"``). Its key is ``"<prefix name>#<index>"``.

What the plan tier reads comes from the ``.idx`` alone: the ``tokens`` column (tokens of
each sample: ``blend_unit: tokens``, packing budgets, filters), ``bytes`` (their size in the
``.bin``) and ``shard_id``. A sample's members are ``tokens`` (the tokens, one after the
other), ``lengths`` (the lengths of the sequences it is made of) and, in a multimodal corpus,
``modes``; each is decoded as a 1-D torch tensor (``int64`` for integer token dtypes; a float
corpus keeps its float dtype) and cooked into a :class:`~fpipe.samples.TokensSample`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.decode.limits import DecodeLimits
from fpipe.storage.config.dataset_yaml import DatasetConfig
from fpipe.storage.paths import is_url
from fpipe.storage.read.dataset import Dataset
from fpipe.storage.read.gpt_corpus import GPT_OPTIONS, gpt_dataset_parts, is_gpt
from fpipe.storage.read.megatron_indexed import IndexedCorpus
from fpipe.storage.read.reader import FileCache
from fpipe.storage.read.record import ArrayStore, IndexRecord, ShardEntry

__all__ = ["MegatronReader", "SAMPLE_UNITS", "megatron_prefixes", "open_megatron"]

#: What one sample of a corpus is: a document (its sequences together) or a sequence.
SAMPLE_UNITS = ("document", "sequence")

_SUFFIXES = (".idx", ".bin")
_FIELD_MAP = {"tokens": "tokens", "lengths": "lengths", "modes": "modes"}


def _strip(path: str) -> str:
    return path[:-4] if path.endswith(_SUFFIXES) else path


def _remote_prefix(url: str, storage: Any) -> bool:
    """Whether ``url.idx`` is an object (one HEAD); False on any error."""
    from fpipe.storage.read.remote import StorageOptions, import_obstore, open_store

    try:
        options = (
            storage if isinstance(storage, StorageOptions) else StorageOptions(**(storage or {}))
        )
        store, name = open_store(url + ".idx", options)
        import_obstore().head(store, name)
    except Exception:  # noqa: BLE001 - not a corpus (missing, or not readable: said elsewhere)
        return False
    return True


def megatron_prefixes(
    path: str | os.PathLike, storage: Any = None
) -> tuple[str, tuple[str, ...]] | None:
    """``(root, prefix names relative to root)`` when ``path`` is a Megatron corpus, else None.

    A corpus is a prefix whose ``.idx`` exists (local, or on object storage), one of its two
    files, or a local folder holding ``.idx`` files with their ``.bin`` (every such prefix
    under it, hidden folders left out, sorted).
    """
    if is_url(path):
        url = _strip(str(path))
        if "/" not in url.split("://", 1)[1] or not _remote_prefix(url, storage):
            return None
        root, name = url.rsplit("/", 1)
        return root, (name,)
    p = _strip(os.fspath(path))
    if os.path.isfile(p + ".idx"):
        return os.path.dirname(os.path.abspath(p)), (os.path.basename(p),)
    if not os.path.isdir(p):
        return None
    names = []
    for here, dirs, files in os.walk(p):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        rel = os.path.relpath(here, p)
        for f in files:
            stem = f[:-4]
            if f.endswith(".idx") and stem + ".bin" in files and not f.startswith("."):
                names.append(stem if rel == "." else f"{rel}/{stem}".replace(os.sep, "/"))
    return (p, tuple(sorted(names))) if names else None


class MegatronReader:
    """Samples of the corpora ``corpora`` (prefix names ``names``), one per document or per
    sequence (``unit``)."""

    def __init__(self, names: tuple[str, ...], corpora: list[IndexedCorpus], unit: str, files):
        self.names = names
        self.corpora = corpora
        self.unit = unit
        self._files = files  # RemoteFiles of a URL (prefetch), else None
        counts = [self.count(c) for c in corpora]
        self.starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
        self._decode = [
            {"tokens": f"tokens.{c.dtype.name}", "lengths": "tokens.int32", "modes": "tokens.int8"}
            for c in corpora
        ]

    def count(self, corpus: IndexedCorpus) -> int:
        """Samples of one corpus."""
        return corpus.num_documents if self.unit == "document" else len(corpus)

    def _locate(self, i: int) -> tuple[int, int]:
        c = int(np.searchsorted(self.starts, i, side="right")) - 1
        return c, i - int(self.starts[c])

    def _range(self, c: int, j: int) -> tuple[int, int]:
        """The sequences ``(start, end)`` of sample ``j`` of corpus ``c``."""
        if self.unit == "document":
            return self.corpora[c].document_range(j)
        return j, j + 1

    def key(self, i: int) -> str:
        c, j = self._locate(i)
        return f"{self.names[c]}#{j}"

    def read(
        self, i: int, exts: frozenset[str] | None = None, limits: DecodeLimits | None = None
    ) -> dict[str, bytes]:
        c, j = self._locate(i)
        corpus = self.corpora[c]
        start, end = self._range(c, j)
        out: dict[str, bytes] = {}
        if exts is None or "tokens" in exts:
            out["tokens"] = corpus.read_sequences(start, end).tobytes()
        if exts is None or "lengths" in exts:
            out["lengths"] = corpus.sequence_lengths[start:end].tobytes()
        modes = corpus.sequence_modes
        if modes is not None and (exts is None or "modes" in exts):
            out["modes"] = modes[start:end].tobytes()
        return out

    def decode_exts(self, i: int) -> dict[str, str]:
        """How the members are decoded: as little-endian arrays of the corpus's dtypes."""
        return self._decode[self._locate(i)[0]]

    def av_names(self, field: str, i: int) -> tuple[str, ...]:
        return ()

    def prefetch(self, indices, exts: frozenset[str] | None = None) -> None:
        """Start the ranged GETs of samples ``indices`` (object storage; a no-op on disk)."""
        if self._files is None or (exts is not None and "tokens" not in exts):
            return
        ranges = []
        for i in indices:
            c, j = self._locate(int(i))
            try:
                off, size = self.corpora[c].span(*self._range(c, j))
            except Exception:  # noqa: BLE001 - a bad sample raises when it is read
                continue
            if size:
                ranges.append((self.corpora[c].bin_path, off, size))
        self._files.prefetch(ranges)


def _arrays(reader: MegatronReader):
    def make(name: str) -> np.ndarray:
        corpora = reader.corpora
        if name == "shard_id.npy":
            counts = [reader.count(c) for c in corpora]
            return np.repeat(np.arange(len(counts), dtype=np.int32), counts)
        if name in ("columns/tokens.npy", "columns/bytes.npy"):
            per = [
                c.token_counts(reader.unit) * (c.dtype.itemsize if "bytes" in name else 1)
                for c in corpora
            ]
            return np.concatenate(per) if per else np.zeros(0, np.int64)
        raise KeyError(name)

    return make


def open_megatron(
    path: str | os.PathLike,
    *,
    sample_unit: str = "document",
    storage: Any = None,
    max_open_files: int = 64,
    shard_check: str = "mtime",
    **gpt: Any,
) -> Dataset:
    """The Megatron corpus at ``path`` (see :func:`megatron_prefixes`) as a dataset.

    ``sample_unit``: ``"document"`` (default) or ``"sequence"``; ``storage``: how to reach a
    URL (:class:`~fpipe.storage.read.remote.StorageOptions` or a dict). ``max_open_files`` and
    ``shard_check`` are the options of other layouts, accepted so that one set of open
    arguments opens every dataset of a metadataset: each open checks the ``.idx`` against the
    ``.bin`` whatever they say. ``gpt``: with ``sequence_length``, the samples are GPT
    sequences across document boundaries (:mod:`fpipe.storage.read.gpt_corpus`, whose
    ``GPT_OPTIONS`` these are), of one prefix.
    """
    unknown = sorted(set(gpt) - set(GPT_OPTIONS))
    if unknown:
        raise ConfigError(f"{path}: unknown open argument(s) {unknown} of a Megatron corpus")
    if gpt and not is_gpt(gpt):
        raise ConfigError(f"{path}: {sorted(gpt)} apply to GPT sequences: give sequence_length")
    if sample_unit not in SAMPLE_UNITS:
        raise ConfigError(f"{path}: sample_unit must be one of {SAMPLE_UNITS}, got {sample_unit!r}")
    found = megatron_prefixes(path, storage)
    if found is None:
        raise ConfigError(f"{path}: no Megatron corpus (no .idx with its .bin) there")
    root, names = found
    files = None
    if is_url(root):
        from fpipe.storage.read.remote import RemoteFiles, StorageOptions

        if not isinstance(storage, StorageOptions):
            storage = StorageOptions(**(storage or {}))
        files = RemoteFiles(root, storage)
        corpora = [IndexedCorpus(f"{root}/{n}", storage=storage, files=files) for n in names]
    else:
        corpora = [IndexedCorpus(os.path.join(root, n)) for n in names]
    where = str(path) if is_url(path) else str(Path(path))
    storage_arg = {"storage": storage} if files else {}
    if gpt:
        if len(names) != 1:
            raise ConfigError(
                f"{path}: GPT sequences are cut from one corpus prefix; this folder holds "
                f"{len(names)} ({names[0]}, ...): give each prefix its own metadataset entry"
            )
        reader_, record_, config_, split_, arrays_, args = gpt_dataset_parts(
            names[0], corpora[0], gpt, path
        )
        return Dataset(
            where,
            record_,
            config_,
            split_,
            arrays_,
            reader_,  # type: ignore[arg-type]
            files if files is not None else FileCache(1),
            where=f"{where} (split {reader_.options.split!r})",
            open_args={**args, **storage_arg},
            reopen=open_megatron,
        )
    reader = MegatronReader(names, corpora, sample_unit, files)
    shards = tuple(
        ShardEntry(n + ".bin", reader.count(c), c.bin_bytes) for n, c in zip(names, corpora)
    )
    record = IndexRecord(
        layout="megatron",
        num_samples=int(reader.starts[-1]),
        shards=shards,
        columns={"tokens": "int64", "bytes": "int64"},
        source="megatron",
    )
    config = DatasetConfig(sample_type="TokensSample", field_map=dict(_FIELD_MAP))
    return Dataset(
        where,
        record,
        config,
        None,
        ArrayStore(make=_arrays(reader)),
        reader,
        files if files is not None else FileCache(1),
        where=where,
        open_args={"sample_unit": sample_unit, **storage_arg},
        reopen=open_megatron,
    )
