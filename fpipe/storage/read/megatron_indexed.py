"""Megatron's indexed text corpora (``prefix.idx`` + ``prefix.bin``), read in place.

Megatron-LM's ``tools/preprocess_data.py`` (megatron-core's ``IndexedDatasetBuilder``) writes
a corpus as two files:

- ``prefix.bin``: the tokens of every sequence, one after the other, as raw little-endian
  values of one dtype;
- ``prefix.idx``: a header and three (or four) arrays, little-endian::

    magic            9 bytes   b"MMIDIDX\\x00\\x00"
    version          uint64    1
    dtype code       uint8     1..8 (:data:`DTYPE_CODES`)
    sequence count   uint64    n
    document count   uint64    d (entries of the document index, the leading 0 included)
    lengths          int32[n]  tokens of each sequence
    pointers         int64[n]  byte offset of each sequence in the .bin
    document index   int64[d]  sequence index where each document starts, then n
    modes            int8[n]   only in a multimodal corpus: the mode of each sequence

Nothing in the header says whether the modes are there: the file's size does (it is one of
the two sizes the counts allow; with no sequence both are the same, and there are no modes).

:class:`IndexedCorpus` maps the ``.idx`` (a copy in the local cache for a prefix on object
storage) and reads tokens from the ``.bin`` by memory map, or by ranged GETs on object storage.
Opening checks what costs O(1): the header, the ``.idx`` size against the counts, the first
and last document boundaries and that the last sequence ends inside the ``.bin``; each read
checks the sequences it reads, so a corrupt index gives an error naming the file, never another
sequence's tokens. :meth:`IndexedCorpus.validate` checks every entry at once.
"""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np

from fpipe.core.errors import BadSampleError, ConfigError
from fpipe.core.temp_names import beside
from fpipe.storage.paths import is_url

__all__ = ["DTYPE_CODES", "HEADER_BYTES", "IndexedCorpus", "MAGIC", "VERSION", "dtype_code"]

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
#: megatron-core's ``DType`` enum: the code stored in the header -> the token dtype.
DTYPE_CODES: dict[int, np.dtype] = {
    code: np.dtype(name).newbyteorder("<")
    for code, name in enumerate(
        ("uint8", "int8", "int16", "int32", "int64", "float64", "float32", "uint16"), start=1
    )
}
HEADER_BYTES = 9 + 8 + 1 + 8 + 8


def dtype_code(dtype: Any) -> int:
    """The header code of token dtype ``dtype`` (ConfigError for a dtype the format lacks)."""
    want = np.dtype(dtype).newbyteorder("<")
    for code, dt in DTYPE_CODES.items():
        if dt == want:
            return code
    names = ", ".join(str(d) for d in DTYPE_CODES.values())
    raise ConfigError(f"token dtype {np.dtype(dtype)} is not one Megatron's format has ({names})")


def _cached_idx(url: str, storage) -> str:
    """A local copy of the ``.idx`` object at ``url``, kept in ``$FPIPE_CACHE`` under the
    URL's hash with the object's size and version (ETag, else time): a changed object is
    copied again, never read through a stale copy."""
    from fpipe.storage.read.remote import import_obstore, open_store, read_object
    from fpipe.storage.read.remote_index import _cache_root

    store, name = open_store(url, storage)
    try:
        head = import_obstore().head(store, name)
    except FileNotFoundError:
        raise ConfigError(f"{url}: no such object") from None
    except Exception as e:  # noqa: BLE001 - obstore's own errors, named with the object
        raise ConfigError(f"{url}: cannot read ({e})") from None
    tag = f"{url}|{head['size']}|{head.get('e_tag')}|{head.get('last_modified')}"
    folder = Path(_cache_root()) / "megatron"
    path = folder / (hashlib.sha256(tag.encode()).hexdigest()[:32] + ".idx")
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = beside(path)  # whole or absent, whichever process or thread copies it too
        tmp.write_bytes(read_object(url, storage))
        os.replace(tmp, path)  # whole or absent: another process may copy it too
    return str(path)


class IndexedCorpus:
    """One Megatron corpus: ``prefix.idx`` and ``prefix.bin`` (a local path or a URL).

    Attributes (read-only numpy views of the mapped ``.idx``):
      prefix: the prefix as given (``str``); ``idx_path`` and ``bin_path`` its two files.
      dtype: the token dtype (little-endian).
      sequence_lengths: ``int32 (n,)``, tokens of each sequence.
      sequence_pointers: ``int64 (n,)``, byte offset of each sequence in the ``.bin``.
      document_indices: ``int64 (documents + 1,)``, where each document's sequences start,
        then ``n``.
      sequence_modes: ``int8 (n,)`` for a multimodal corpus, else None.
      bin_bytes: the size of the ``.bin``.

    ``storage``: :class:`~fpipe.storage.read.remote.StorageOptions` (or a dict of its fields)
    for a URL; ``files``: the ranged reader of a URL's ``.bin`` (a
    :class:`~fpipe.storage.read.remote.RemoteFiles`; default: one of its own).

    Raises:
      ConfigError: a file is missing, or the ``.idx`` is not a Megatron index or disagrees
        with itself or with the ``.bin`` (the message names the file and what is wrong).
    """

    def __init__(self, prefix: str | os.PathLike, *, storage: Any = None, files: Any = None):
        self.prefix = os.fspath(prefix)
        self.idx_path = self.prefix + ".idx"
        self.bin_path = self.prefix + ".bin"
        self._storage = storage
        self._remote = is_url(self.prefix)
        self._bin: np.ndarray | None = None  # the .bin's map, made on first read
        self._files = files
        if self._remote:
            from fpipe.storage.read.remote import RemoteFiles, StorageOptions

            if not isinstance(storage, StorageOptions):
                storage = self._storage = StorageOptions(**(storage or {}))
            if self._files is None:
                self._files = RemoteFiles(self.prefix.rsplit("/", 1)[0], storage)
            local_idx = _cached_idx(self.idx_path, storage)
            try:
                self.bin_bytes = self._files.size(self.bin_path)
            except OSError as e:
                raise ConfigError(f"{self.bin_path}: cannot read the corpus tokens ({e})") from None
        else:
            local_idx = self.idx_path
            try:
                self.bin_bytes = os.stat(self.bin_path).st_size
            except OSError as e:
                raise ConfigError(f"{self.bin_path}: cannot read the corpus tokens ({e})") from None
        self._open_index(local_idx)
        self._check_ends()

    def __reduce__(self):  # a worker reopens the files: no map or descriptor is pickled
        return _reopen, (self.prefix, self._storage)

    def __repr__(self) -> str:
        return (
            f"IndexedCorpus({self.prefix!r}, dtype={self.dtype}, sequences={len(self)}, "
            f"documents={self.num_documents}, multimodal={self.multimodal})"
        )

    def _bad(self, what: str) -> ConfigError:
        return ConfigError(f"{self.idx_path}: not a readable Megatron index: {what}")

    def _open_index(self, path: str) -> None:
        try:
            size = os.stat(path).st_size
            with open(path, "rb") as f:
                head = f.read(HEADER_BYTES)
        except OSError as e:
            raise ConfigError(f"{self.idx_path}: cannot read the corpus index ({e})") from None
        if len(head) < HEADER_BYTES:
            raise self._bad(f"{size} bytes, shorter than the {HEADER_BYTES}-byte header")
        if head[:9] != MAGIC:
            raise self._bad(f"magic is {head[:9]!r}, expected {MAGIC!r}")
        version, code, n, d = struct.unpack("<QBQQ", head[9:])
        if version != VERSION:
            raise self._bad(f"index version {version}; this reader knows version {VERSION}")
        if code not in DTYPE_CODES:
            raise self._bad(f"token dtype code {code}, not one of {sorted(DTYPE_CODES)}")
        plain = HEADER_BYTES + 12 * n + 8 * d
        if size not in (plain, plain + n):
            raise self._bad(
                f"{size} bytes, but its header counts {n} sequences and {d} document index "
                f"entries: {plain} bytes (or {plain + n} with sequence modes); the file is "
                "truncated or its header is corrupt"
            )
        if d < 1:
            raise self._bad("no document index (it holds at least the leading 0)")
        self.dtype: np.dtype = DTYPE_CODES[code]
        self.multimodal = n > 0 and size == plain + n
        mm = np.memmap(path, dtype=np.uint8, mode="r")
        at = HEADER_BYTES

        def take(dt: str, count: int) -> np.ndarray:
            nonlocal at
            arr = mm[at : at + count * np.dtype(dt).itemsize].view(dt).view(np.ndarray)
            at += arr.nbytes
            return arr

        self.sequence_lengths = take("<i4", n)
        self.sequence_pointers = take("<i8", n)
        self.document_indices = take("<i8", d)
        self.sequence_modes = take("<i1", n) if self.multimodal else None

    def _check_ends(self) -> None:
        di = self.document_indices
        n = len(self)
        if int(di[0]) != 0 or int(di[-1]) != n:
            raise self._bad(
                f"the document index runs from {int(di[0])} to {int(di[-1])}; it must run from "
                f"0 to the sequence count {n}"
            )
        if n and self._sequence_end(n - 1) > self.bin_bytes:
            raise ConfigError(
                f"{self.bin_path}: {self.bin_bytes} bytes, but {self.idx_path} has its last "
                f"sequence end at byte {self._sequence_end(n - 1)}: the .bin is truncated or "
                "belongs to another index"
            )

    def _sequence_end(self, i: int) -> int:
        return int(self.sequence_pointers[i]) + int(self.sequence_lengths[i]) * self.dtype.itemsize

    def __len__(self) -> int:
        """Sequences in the corpus."""
        return len(self.sequence_lengths)

    @property
    def num_documents(self) -> int:
        """Documents in the corpus (``len(document_indices) - 1``)."""
        return len(self.document_indices) - 1

    def key(self, i: int) -> str:
        """``"<prefix name>#<i>"``, how errors name item ``i`` (a sequence or a document)."""
        return f"{os.path.basename(self.prefix)}#{i}"

    def document_range(self, d: int) -> tuple[int, int]:
        """``(first, end)``: the sequences of document ``d`` (``end`` excluded).

        Raises:
          IndexError: ``d`` is not a document of the corpus.
          BadSampleError: the document index is corrupt there (not increasing, past the end).
        """
        d = int(d)
        if not 0 <= d < self.num_documents:
            raise IndexError(f"document {d} out of range for {self.num_documents} documents")
        start, end = int(self.document_indices[d]), int(self.document_indices[d + 1])
        if not 0 <= start <= end <= len(self):
            raise BadSampleError(
                self.idx_path,
                self.key(d),
                f"document index entries {d} and {d + 1} are {start} and {end}: not increasing "
                f"within the {len(self)} sequences",
            )
        return start, end

    def _span(self, i: int) -> tuple[int, int]:
        """``(byte offset, tokens)`` of sequence ``i``, checked against the ``.bin``."""
        ptr, n = int(self.sequence_pointers[i]), int(self.sequence_lengths[i])
        if n < 0 or ptr < 0 or ptr + n * self.dtype.itemsize > self.bin_bytes:
            raise BadSampleError(
                self.bin_path,
                self.key(i),
                f"{self.idx_path} puts sequence {i} ({n} tokens) at byte {ptr}, outside the "
                f"{self.bin_bytes}-byte .bin",
            )
        return ptr, n

    def read(self, i: int, offset: int = 0, length: int | None = None) -> np.ndarray:
        """Tokens ``offset .. offset + length`` of sequence ``i`` (all after ``offset`` when
        ``length`` is None), as a read-only array of :attr:`dtype` (megatron-core's
        ``IndexedDataset.get(i, offset, length)``).

        Raises:
          IndexError: ``i`` is not a sequence, or the range leaves it.
          BadSampleError: the index puts the sequence outside the ``.bin``.
        """
        i = int(i)
        if not 0 <= i < len(self):
            raise IndexError(f"sequence {i} out of range for {len(self)} sequences")
        ptr, n = self._span(i)
        length = n - offset if length is None else int(length)
        if offset < 0 or length < 0 or offset + length > n:
            raise IndexError(f"tokens {offset}..{offset + length} leave sequence {i} ({n} tokens)")
        return self._tokens(ptr + offset * self.dtype.itemsize, length, i)

    def read_sequences(self, start: int, end: int) -> np.ndarray:
        """The tokens of sequences ``start .. end`` one after the other (one read when they are
        contiguous in the ``.bin``, as Megatron writes them)."""
        if start >= end:
            return np.zeros(0, dtype=self.dtype)
        first, _ = self._span(start)
        spans = [self._span(j) for j in range(start + 1, end)] if end - start > 1 else []
        total = int(self.sequence_lengths[start]) + sum(n for _, n in spans)
        if self._sequence_end(end - 1) - first == total * self.dtype.itemsize:
            return self._tokens(first, total, start)
        parts = [self.read(start)] + [self._tokens(p, n, start) for p, n in spans]
        return np.concatenate(parts)

    def read_document(self, d: int) -> np.ndarray:
        """The tokens of document ``d`` (its sequences one after the other)."""
        return self.read_sequences(*self.document_range(d))

    def span(self, start: int, end: int) -> tuple[int, int]:
        """``(byte offset, bytes)`` of sequences ``start .. end`` in the ``.bin`` when they are
        contiguous there (what one ranged read fetches), else ``(offset of start, 0)``."""
        if start >= end:
            return 0, 0
        first, _ = self._span(start)
        size = self._sequence_end(end - 1) - first
        want = int(self.sequence_lengths[start:end].sum(dtype=np.int64)) * self.dtype.itemsize
        return (first, size) if size == want else (first, 0)

    def _tokens(self, ptr: int, count: int, i: int) -> np.ndarray:
        size = count * self.dtype.itemsize
        if count == 0:
            return np.zeros(0, dtype=self.dtype)
        if self._remote:
            try:
                data = self._files.pread(self.bin_path, ptr, size)
            except OSError as e:
                raise BadSampleError(self.bin_path, self.key(i), f"cannot read: {e}") from None
            if len(data) != size:
                raise BadSampleError(
                    self.bin_path, self.key(i), f"{len(data)} of {size} bytes at {ptr} read"
                )
            return np.frombuffer(data, dtype=self.dtype)
        if self._bin is None:
            self._bin = np.memmap(self.bin_path, dtype=np.uint8, mode="r").view(np.ndarray)
        got = self._bin[ptr : ptr + size]
        if len(got) != size:  # the .bin shrank after it was opened
            raise BadSampleError(
                self.bin_path, self.key(i), f"{len(got)} of {size} bytes at {ptr} read"
            )
        return got.view(self.dtype)

    def token_counts(self, unit: str = "document") -> np.ndarray:
        """``int64``: tokens of each document (``unit="document"``) or each sequence.

        Reads every length (and document boundary): a corrupt entry met here is a
        :class:`ConfigError` naming the ``.idx``.
        """
        lengths = self.sequence_lengths.astype(np.int64)
        if len(lengths) and int(lengths.min()) < 0:
            raise self._bad(f"sequence {int(np.argmin(lengths))} has a negative length")
        if unit == "sequence":
            return lengths
        self._check_document_index()
        ends = np.concatenate([[0], np.cumsum(lengths)])
        di = self.document_indices
        return ends[di[1:]] - ends[di[:-1]]

    def _check_document_index(self) -> None:
        di = self.document_indices
        if len(di) > 1:
            steps = np.diff(di)
            if int(steps.min()) < 0:
                d = int(np.argmax(steps < 0))
                raise self._bad(
                    f"the document index decreases at entry {d + 1} ({int(di[d])} then "
                    f"{int(di[d + 1])})"
                )

    def validate(self) -> None:
        """Check every entry of the ``.idx`` against the ``.bin`` (O(sequences), vectorized):
        lengths not negative, every sequence inside the ``.bin``, document boundaries
        increasing from 0 to the sequence count.

        Raises:
          ConfigError: naming the file, the first bad entry and what is wrong.
        """
        self.token_counts("sequence")
        self._check_document_index()
        ptr = self.sequence_pointers
        end = ptr + self.sequence_lengths.astype(np.int64) * self.dtype.itemsize
        bad = (ptr < 0) | (end > self.bin_bytes)
        if bad.any():
            i = int(np.argmax(bad))
            raise ConfigError(
                f"{self.idx_path}: sequence {i} lies at bytes {int(ptr[i])}..{int(end[i])}, "
                f"outside {self.bin_path} ({self.bin_bytes} bytes)"
            )


def _reopen(prefix: str, storage: Any) -> IndexedCorpus:
    return IndexedCorpus(prefix, storage=storage)
