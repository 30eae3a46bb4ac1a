"""Writing Megatron indexed corpora (``prefix.bin`` + ``prefix.idx``).

:class:`IndexedCorpusWriter` writes the files megatron-core's ``IndexedDatasetBuilder`` writes,
byte for byte, for the same calls (``add_item`` / ``end_document``, ``add_document``,
``add_index``, ``finalize``; multimodal modes included), so a corpus converted or built with
fpipe is read by Megatron-LM as it is, and tests build their corpora without Megatron. The
format is described in :mod:`fpipe.storage.read.megatron_indexed`.

Where megatron-core writes silently wrong files, this writer refuses: a token its dtype cannot
hold (it would wrap), and ``add_document`` lengths that do not add up to the tokens given.
"""

from __future__ import annotations

import os
import shutil
import struct
from typing import Any

import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.storage.read.megatron_indexed import MAGIC, VERSION, IndexedCorpus, dtype_code

__all__ = ["IndexedCorpusWriter"]


class IndexedCorpusWriter:
    """Writes ``prefix.bin`` as items are added and ``prefix.idx`` at :meth:`finalize`.

    Args:
      prefix: the corpus's path without ``.bin`` / ``.idx`` (a local path).
      dtype: the token dtype (megatron-core's default is int32; ``preprocess_data.py`` picks
        uint16 for vocabularies under 65500 tokens, else int32).
      multimodal: whether each sequence carries a mode (``int8``), stored after the index.

    Example:
      >>> import tempfile, os
      >>> d = tempfile.mkdtemp()
      >>> with IndexedCorpusWriter(os.path.join(d, "c"), dtype="uint16") as w:
      ...     w.add_item([5, 6, 7]); w.end_document()
      ...     w.add_document([1, 2, 3, 4], lengths=[1, 3])
      >>> IndexedCorpus(os.path.join(d, "c")).read_document(1).tolist()
      [1, 2, 3, 4]
    """

    def __init__(self, prefix: str | os.PathLike, dtype: Any = np.int32, multimodal: bool = False):
        self.prefix = os.fspath(prefix)
        self.dtype = np.dtype(dtype).newbyteorder("<")
        self._code = dtype_code(self.dtype)
        self.multimodal = bool(multimodal)
        self.sequence_lengths: list[int] = []
        self.document_indices: list[int] = [0]
        self.sequence_modes: list[int] | None = [] if self.multimodal else None
        self._bin = open(self.prefix + ".bin", "wb")  # noqa: SIM115 - closed by finalize

    def __enter__(self) -> IndexedCorpusWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.finalize()
        else:
            self._bin.close()

    def _tokens(self, tokens: Any) -> np.ndarray:
        arr = np.asarray(tokens.numpy() if hasattr(tokens, "numpy") else tokens)
        if self.dtype.kind in "iu" and arr.size:
            info = np.iinfo(self.dtype)
            lo, hi = arr.min(), arr.max()
            if lo < info.min or hi > info.max:
                raise ConfigError(
                    f"{self.prefix}.bin: token values {lo}..{hi} do not fit {self.dtype.name} "
                    f"({info.min}..{info.max}); write the corpus with a wider dtype"
                )
        return np.ascontiguousarray(arr, dtype=self.dtype).reshape(-1)

    def add_item(self, tokens: Any, mode: int = 0) -> None:
        """Append one sequence (``mode``: its mode, for a multimodal corpus)."""
        arr = self._tokens(tokens)
        self._bin.write(arr.tobytes())
        self.sequence_lengths.append(int(arr.size))
        if self.sequence_modes is not None:
            self.sequence_modes.append(int(mode))

    def end_document(self) -> None:
        """End the document made of the sequences added since the last one ended."""
        self.document_indices.append(len(self.sequence_lengths))

    def add_document(self, tokens: Any, lengths: list[int], modes: list[int] | None = None) -> None:
        """Append one whole document: its ``tokens``, cut into sequences of ``lengths``
        (``modes``: one per sequence, default 0)."""
        arr = self._tokens(tokens)
        lengths = [int(n) for n in lengths]
        if sum(lengths) != arr.size or min(lengths, default=0) < 0:
            raise ConfigError(
                f"{self.prefix}: add_document lengths {lengths} do not cut {arr.size} tokens"
            )
        if modes is not None and len(modes) != len(lengths):
            raise ConfigError(f"{self.prefix}: {len(modes)} modes for {len(lengths)} sequences")
        self._bin.write(arr.tobytes())
        self.sequence_lengths.extend(lengths)
        self.document_indices.append(len(self.sequence_lengths))
        if self.sequence_modes is not None:
            self.sequence_modes.extend(int(m) for m in (modes or [0] * len(lengths)))

    def add_index(self, prefix: str | os.PathLike) -> None:
        """Append every document of the corpus at ``prefix`` (same dtype; modes when this
        corpus is multimodal), as megatron-core's ``add_index`` merges shards."""
        other = IndexedCorpus(prefix)
        if other.dtype != self.dtype:
            raise ConfigError(
                f"{other.idx_path}: dtype {other.dtype}, this corpus has {self.dtype}"
            )
        if self.sequence_modes is not None and other.sequence_modes is None:
            raise ConfigError(f"{other.idx_path}: has no sequence modes to merge")
        offset = len(self.sequence_lengths)
        self.sequence_lengths.extend(other.sequence_lengths.tolist())
        self.document_indices.extend((other.document_indices[1:] + offset).tolist())
        if self.sequence_modes is not None:
            self.sequence_modes.extend(other.sequence_modes.tolist())  # type: ignore[union-attr]
        with open(other.bin_path, "rb") as f:
            shutil.copyfileobj(f, self._bin)

    def finalize(self, idx_path: str | os.PathLike | None = None) -> None:
        """Close the ``.bin`` and write the index (to ``prefix.idx``, or ``idx_path``)."""
        self._bin.close()
        n = len(self.sequence_lengths)
        lengths = np.asarray(self.sequence_lengths, dtype="<i4")
        pointers = np.zeros(n, dtype="<i8")
        if n > 1:
            np.cumsum(lengths[:-1].astype(np.int64) * self.dtype.itemsize, out=pointers[1:])
        path = self.prefix + ".idx" if idx_path is None else os.fspath(idx_path)
        with open(path, "wb") as f:
            f.write(MAGIC)
            f.write(struct.pack("<QB", VERSION, self._code))
            f.write(struct.pack("<QQ", n, len(self.document_indices)))
            f.write(lengths.tobytes())
            f.write(pointers.tobytes())
            f.write(np.asarray(self.document_indices, dtype="<i8").tobytes())
            if self.sequence_modes is not None:
                f.write(np.asarray(self.sequence_modes, dtype="<i1").tobytes())
