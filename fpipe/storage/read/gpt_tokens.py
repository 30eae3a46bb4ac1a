"""Megatron GPT samples of a batch at once: where their tokens are, one read, their fields.

A GPT sample is ``seq_length (+ 1)`` tokens of a *stream*, a corpus's documents laid end to
end (Megatron's ``document_index``): sample row ``r`` reads the stream's tokens
``[r * seq_length, r * seq_length + width)`` (Megatron's ``sample_index`` cuts the stream
this way), padded past the stream's end (Megatron's short last sample).

- :class:`TokenStream` finds the document pieces of a batch of rows (:class:`Pieces`) by two
  binary searches per row;
- :class:`TokenGather` reads their tokens from the ``.bin`` at once (a slice per piece, or
  one gather where pieces are short; a read per piece on object storage or for an unaligned
  corpus);
- :func:`batch_fields` makes Megatron ``GPTDataset.__getitem__``'s fields of the whole batch
  with numpy: ``tokens``, ``labels``, ``loss_mask``, ``position_ids``, ``attention_mask``
  (with ``create_attention_mask``), and ``cu_seqlens`` for variable-length attention.

Both :class:`~fpipe.datasets.megatron_gpt.MegatronGPT` (a blend in Megatron's order) and the
``sequence_length`` datasets of :mod:`fpipe.storage.read.gpt_corpus` build their samples here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from fpipe.core.errors import BadSampleError

__all__ = ["GPTFields", "Pieces", "TokenGather", "TokenStream", "batch_fields"]


@dataclasses.dataclass(frozen=True)
class GPTFields:
    """Megatron's ``GPTDatasetConfig`` options that shape a sample (its defaults are these).

    ``eod``: the end-of-document token; ``pad``: the padding token (Megatron's default -1
    when the tokenizer has none); ``extra``: 1 with ``add_extra_token_to_sequence``.
    """

    eod: int
    pad: int = -1
    extra: int = 1
    reset_position_ids: bool = False
    reset_attention_mask: bool = False
    eod_mask_loss: bool = False
    create_attention_mask: bool = False


@dataclasses.dataclass(frozen=True)
class Pieces:
    """The document pieces of a batch of samples, in order (by sample, then column): sample
    ``row``, first column ``col``, stream position ``pos``, sequence ``seq``, offset ``off``
    in it and ``length``; padding is a piece of ``seq`` and ``off`` -1 and the position past
    the stream's last document (so a document boundary falls where padding starts, as
    Megatron's padding is a piece of its own)."""

    row: np.ndarray
    col: np.ndarray
    pos: np.ndarray
    seq: np.ndarray
    off: np.ndarray
    length: np.ndarray

    def positions(self, rows: int, width: int) -> np.ndarray:
        """The stream position of every token, ``(rows, width)``."""
        return np.repeat(self.pos, self.length).reshape(rows, width)

    def of(self, b: int) -> list[tuple[int, int, int]]:
        """``(sequence, offset, length)`` of sample ``b``'s document pieces (no padding)."""
        at = np.flatnonzero((self.row == b) & (self.off >= 0)).tolist()
        return [(int(self.seq[k]), int(self.off[k]), int(self.length[k])) for k in at]


class TokenStream:
    """A corpus's documents laid end to end: ``documents`` (sequence ids, in stream order),
    their token counts and cumulative ``ends``; ``rows`` maps a sample to its stream row
    (None: sample ``j`` is row ``j``)."""

    def __init__(self, documents: np.ndarray, lengths: np.ndarray, rows: np.ndarray | None = None):
        self.documents = np.asarray(documents, dtype=np.int64)
        self.doc_lengths = np.asarray(lengths)[self.documents].astype(np.int64)
        self.ends = np.cumsum(self.doc_lengths)
        self.rows = rows

    def pieces(self, rows: np.ndarray, seq_length: int, width: int) -> Pieces:
        """The pieces of stream rows ``rows`` (tokens ``[r * seq_length, + width)``): two
        binary searches per row find its first and last document."""
        ends, n_docs = self.ends, len(self.ends)
        start = np.asarray(rows, dtype=np.int64) * seq_length
        stop = start + width
        first = np.searchsorted(ends, start, side="right")
        last = np.minimum(np.searchsorted(ends, stop - 1, side="right"), n_docs - 1)
        counts = np.maximum(last - first + 1, 0)
        row = np.repeat(np.arange(len(start)), counts)
        pos = np.repeat(first - np.cumsum(counts) + counts, counts) + np.arange(len(row))
        doc_start = ends[pos] - self.doc_lengths[pos]
        begin = np.maximum(doc_start, start[row])
        length = np.minimum(ends[pos], stop[row]) - begin
        seq, off = self.documents[pos], begin - doc_start
        padding = stop - np.clip(ends[-1] if n_docs else 0, start, stop)
        if padding.any():  # past the stream's end (a short last sample): one padding piece
            p_row = np.flatnonzero(padding)
            minus = np.full(len(p_row), -1, dtype=np.int64)
            row = np.concatenate([row, p_row])
            pos = np.concatenate([pos, np.full(len(p_row), n_docs, dtype=np.int64)])
            begin = np.concatenate([begin, stop[p_row] - padding[p_row]])
            length = np.concatenate([length, padding[p_row]])
            seq, off = np.concatenate([seq, minus]), np.concatenate([off, minus])
            keep = np.flatnonzero(length > 0)  # a sequence of no token makes no piece
            keep = keep[np.lexsort((begin[keep], row[keep]))]
        elif length.all():  # in order (by row, then column) and none empty: kept as they are
            return Pieces(row, begin - start[row], pos, seq, off, length)
        else:
            keep = np.flatnonzero(length > 0)
        return Pieces(
            row=row[keep],
            col=(begin - start[row])[keep],
            pos=pos[keep],
            seq=seq[keep],
            off=off[keep],
            length=length[keep],
        )


class TokenGather:
    """Reads the tokens of pieces of a corpus from the ``.bin`` mapped as tokens (local,
    aligned): one slice copy per piece where pieces are long (``_SLICE_TOKENS`` tokens or
    more on average: Python's cost per piece is less than a gather's per token), else one
    gather by a token index; one read per piece on object storage or for an unaligned corpus.
    The map is not pickled (a worker maps the file again)."""

    #: Mean tokens per piece from which a slice per piece beats one gather (measured: a
    #: slice costs about as much as gathering 400 tokens).
    _SLICE_TOKENS = 512

    def __init__(self, corpus):
        self.corpus = corpus
        self._tokens: np.ndarray | None = None
        self._mapped = False

    def __getstate__(self) -> dict[str, Any]:
        return {"corpus": self.corpus, "_tokens": None, "_mapped": False}

    def _local_tokens(self) -> np.ndarray | None:
        """The ``.bin`` mapped as tokens, decided once (the check reads every sequence
        pointer): None on object storage or where a sequence starts off a token boundary."""
        if not self._mapped:
            c = self.corpus
            size = c.dtype.itemsize
            if not getattr(c, "_remote", False) and not bool((c.sequence_pointers % size).any()):
                raw = np.memmap(c.bin_path, dtype=np.uint8, mode="r")
                self._tokens = raw[: len(raw) // size * size].view(c.dtype).view(np.ndarray)
            self._mapped = True
        return self._tokens

    def read(
        self, pieces: Pieces, rows: int, width: int, pad: int, key: Callable[[int], str]
    ) -> np.ndarray:
        """The tokens of ``rows`` samples (int64, ``(rows, width)``), ``pad`` on padding; a
        piece outside its sequence or the ``.bin`` is a BadSampleError naming ``key(row)``."""
        c = self.corpus
        size = c.dtype.itemsize
        ptrs = c.sequence_pointers
        real = pieces.off >= 0
        tokens = self._local_tokens()
        if tokens is not None:
            seq = np.where(real, pieces.seq, 0)
            base = np.where(real, ptrs[seq] // size + pieces.off, 0)
            over = (pieces.off + pieces.length > c.sequence_lengths[seq]) | (base < 0)
            bad = real & (over | (base + pieces.length > len(tokens)))
            if bad.any():
                k = int(np.flatnonzero(bad)[0])
                raise BadSampleError(
                    c.bin_path,
                    key(int(pieces.row[k])),
                    f"a token of sequence {int(pieces.seq[k])} leaves the .bin",
                )
            if len(base) * self._SLICE_TOKENS <= rows * width:  # long pieces: copy each as a slice
                out = np.empty((rows, width), dtype=np.int64)
                cols = zip(pieces.row.tolist(), pieces.col.tolist(), base.tolist())
                for (b, col, start), n, ok in zip(cols, pieces.length.tolist(), real.tolist()):
                    out[b, col : col + n] = tokens[start : start + n] if ok else pad
                return out
            at = np.repeat(base - pieces.col, pieces.length).reshape(rows, width)
            out = tokens[at + np.arange(width)].astype(np.int64)
            if not real.all():
                out[np.repeat(~real, pieces.length).reshape(rows, width)] = pad
            return out
        out = np.full((rows, width), pad, dtype=np.int64)
        for k in np.flatnonzero(real).tolist():
            b, col, n = int(pieces.row[k]), int(pieces.col[k]), int(pieces.length[k])
            out[b, col : col + n] = c.read(int(pieces.seq[k]), int(pieces.off[k]), n)
        return out


#: ``{name: (shape, dtype)}`` -> uninitialized arrays of them (where a batch's fields live).
Empty = Callable[[dict[str, tuple[tuple[int, ...], np.dtype]]], dict[str, np.ndarray]]


def _numpy_empty(specs: dict[str, tuple[tuple[int, ...], np.dtype]]) -> dict[str, np.ndarray]:
    return {name: np.empty(shape, dtype) for name, (shape, dtype) in specs.items()}


def batch_fields(
    text: np.ndarray, pos: np.ndarray, fields: GPTFields, empty: Empty | None = None
) -> dict[str, Any]:
    """Megatron ``GPTDataset``'s fields of a batch from its tokens ``text`` (``(B, S +
    extra)``) and each token's document position (``pos``): ``tokens``, ``labels`` (the next
    token of each), ``loss_mask`` (0 on EOD with ``eod_mask_loss``, and where a label is
    padding), ``position_ids`` (restarting after each EOD with ``reset_position_ids``) as
    ``(B, S)`` arrays; ``attention_mask`` ``(B, 1, S, S)`` with ``create_attention_mask``
    (causal, split at each EOD with ``reset_attention_mask``; True where attention is *not*
    allowed, as Megatron's); ``cu_seqlens``: per sample, where each document starts in
    ``tokens``, then ``S`` (int32; views of one array).

    ``empty`` allocates the arrays the fields are written into, all but ``attention_mask``
    in one call (one block of memory: :class:`~fpipe.datasets.megatron_gpt.MegatronGPT`
    gives one shared-memory block in a DataLoader worker), ``attention_mask`` in another (the
    large one, so that a kept field does not keep it alive). Vectorized: the last EOD before
    each token replaces Megatron's loop over EODs."""
    empty = empty or _numpy_empty
    pad, eod = fields.pad, fields.eod
    rows, n = len(text), text.shape[1] - fields.extra
    starts = np.flatnonzero(pos[:, 1:n] != pos[:, : n - 1])  # (2-D nonzero is slower)
    inner_r, inner_c = divmod(starts, max(n - 1, 1))  # a document starts at column c + 1
    per = np.bincount(inner_r, minlength=rows) + 2  # cu_seqlens entries of each sample
    i64 = np.dtype(np.int64)
    out = empty(
        {
            "tokens": ((rows, n), i64),
            "labels": ((rows, n), i64),
            "loss_mask": ((rows, n), np.dtype(np.float32)),
            "position_ids": ((rows, n), i64),
            "cu_seqlens": ((int(per.sum()),), np.dtype(np.int32)),
        }
    )
    tokens, labels = out["tokens"], out["labels"]
    tokens[...] = text[:, :n]
    if fields.extra:
        labels[...] = text[:, 1:]
    else:
        labels[:, :-1] = text[:, 1:]
        labels[:, -1] = pad
    is_eod = tokens == eod
    loss_mask = out["loss_mask"]
    loss_mask.fill(1.0)
    if fields.eod_mask_loss:
        loss_mask[is_eod] = 0.0
    col = np.arange(n, dtype=np.int64)
    if fields.reset_position_ids:  # positions since the token after the last EOD before
        after = np.where(is_eod, col + 1, 0)
        first = np.zeros((rows, 1), np.int64)
        start = np.maximum.accumulate(np.concatenate([first, after[:, :-1]], axis=1), axis=1)
        np.subtract(col, start, out=out["position_ids"])
    else:
        out["position_ids"][...] = col
    if fields.create_attention_mask:
        allowed = np.broadcast_to(np.tri(n, dtype=bool), (rows, n, n))
        if fields.reset_attention_mask:  # segment of each token: the EODs strictly before it
            segment = np.cumsum(is_eod, axis=1) - is_eod
            allowed = allowed & (segment[:, :, None] == segment[:, None, :])
        mask = empty({"attention_mask": ((rows, 1, n, n), np.dtype(bool))})["attention_mask"]
        np.logical_not(allowed[:, None], out=mask)
        out["attention_mask"] = mask
    if not fields.extra or (text == pad).any():  # a pad label, or padding read: rare
        loss_mask[labels == pad] = 0.0
        tokens[tokens == pad] = 0
        labels[labels == pad] = 0
    cu = out["cu_seqlens"]
    ends = np.cumsum(per)
    cu[ends - per] = 0
    cu[ends - 1] = n
    if len(inner_r):  # the k-th document start of sample r goes to its slot k + 1
        k = np.arange(len(inner_r)) - (np.cumsum(per - 2) - (per - 2))[inner_r]
        cu[(ends - per)[inner_r] + 1 + k] = inner_c + 1
    bounds = ends.tolist()
    out["cu_seqlens"] = [cu[a - b : a] for a, b in zip(bounds, per.tolist())]
    return out
