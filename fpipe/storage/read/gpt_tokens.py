"""Megatron GPT samples of a batch at once: where their tokens are, one gather, their fields.

A GPT sample is ``seq_length (+ 1)`` tokens of a *stream*, a corpus's documents laid end to
end (Megatron's ``document_index``): sample row ``r`` reads the stream's tokens
``[r * seq_length, r * seq_length + width)`` (Megatron's ``sample_index`` cuts the stream
this way), padded past the stream's end (Megatron's short last sample).

- :class:`TokenStream` finds the document pieces of a batch of rows (:class:`Pieces`) by two
  binary searches per row;
- :class:`TokenGather` reads their tokens from the ``.bin`` with one gather (a read per
  piece on object storage or for an unaligned corpus);
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
        return Pieces(
            row=row[keep],
            col=(begin - start[row])[keep],
            pos=pos[keep],
            seq=seq[keep],
            off=off[keep],
            length=length[keep],
        )


class TokenGather:
    """Reads the tokens of pieces of a corpus: one gather from the ``.bin`` mapped as tokens
    (local, aligned), else one read per piece. The map is not pickled (a worker maps the
    file again)."""

    def __init__(self, corpus):
        self.corpus = corpus
        self._tokens: np.ndarray | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"corpus": self.corpus, "_tokens": None}

    def read(
        self, pieces: Pieces, rows: int, width: int, pad: int, key: Callable[[int], str]
    ) -> np.ndarray:
        """The tokens of ``rows`` samples (int64, ``(rows, width)``), ``pad`` on padding; a
        piece outside its sequence or the ``.bin`` is a BadSampleError naming ``key(row)``."""
        c = self.corpus
        size = c.dtype.itemsize
        ptrs = c.sequence_pointers
        real = pieces.off >= 0
        if not getattr(c, "_remote", False) and not bool((ptrs % size).any()):
            if self._tokens is None:
                raw = np.memmap(c.bin_path, dtype=np.uint8, mode="r")
                self._tokens = raw[: len(raw) // size * size].view(c.dtype).view(np.ndarray)
            seq = np.where(real, pieces.seq, 0)
            base = np.where(real, ptrs[seq] // size + pieces.off, 0)
            over = (pieces.off + pieces.length > c.sequence_lengths[seq]) | (base < 0)
            bad = real & (over | (base + pieces.length > len(self._tokens)))
            if bad.any():
                k = int(np.flatnonzero(bad)[0])
                raise BadSampleError(
                    c.bin_path,
                    key(int(pieces.row[k])),
                    f"a token of sequence {int(pieces.seq[k])} leaves the .bin",
                )
            at = np.repeat(base - pieces.col, pieces.length).reshape(rows, width)
            out = self._tokens[at + np.arange(width)].astype(np.int64)
            if not real.all():
                out[np.repeat(~real, pieces.length).reshape(rows, width)] = pad
            return out
        out = np.full((rows, width), pad, dtype=np.int64)
        for k in np.flatnonzero(real).tolist():
            b, col, n = int(pieces.row[k]), int(pieces.col[k]), int(pieces.length[k])
            out[b, col : col + n] = c.read(int(pieces.seq[k]), int(pieces.off[k]), n)
        return out


def batch_fields(text: np.ndarray, pos: np.ndarray, fields: GPTFields) -> dict[str, Any]:
    """Megatron ``GPTDataset``'s fields of a batch from its tokens ``text`` (``(B, S +
    extra)``) and each token's document position (``pos``): ``tokens``, ``labels`` (the next
    token of each), ``loss_mask`` (0 on EOD with ``eod_mask_loss``, and where a label is
    padding), ``position_ids`` (restarting after each EOD with ``reset_position_ids``) as
    ``(B, S)`` arrays; ``attention_mask`` ``(B, 1, S, S)`` with ``create_attention_mask``
    (causal, split at each EOD with ``reset_attention_mask``; True where attention is *not*
    allowed, as Megatron's); ``cu_seqlens``: per sample, where each document starts in
    ``tokens``, then ``S`` (int32).

    Vectorized: the last EOD before each token replaces Megatron's loop over EODs."""
    pad, eod = fields.pad, fields.eod
    if fields.extra:
        tokens, labels = text[:, :-1].copy(), text[:, 1:].copy()
    else:
        tokens = text.copy()
        labels = np.concatenate([text[:, 1:], np.full((len(text), 1), pad)], axis=1)
    n = tokens.shape[1]
    is_eod = tokens == eod
    loss_mask = np.ones(tokens.shape, dtype=np.float32)
    if fields.eod_mask_loss:
        loss_mask[is_eod] = 0.0
    col = np.broadcast_to(np.arange(n, dtype=np.int64), tokens.shape)
    position_ids = col.copy()
    if fields.reset_position_ids:  # positions since the token after the last EOD before
        after = np.where(is_eod, col + 1, 0)
        first = np.zeros((len(text), 1), np.int64)
        start = np.maximum.accumulate(np.concatenate([first, after[:, :-1]], axis=1), axis=1)
        position_ids = col - start
    out: dict[str, Any] = {}
    if fields.create_attention_mask:
        allowed = np.broadcast_to(np.tri(n, dtype=bool), (len(text), n, n))
        if fields.reset_attention_mask:  # segment of each token: the EODs strictly before it
            segment = np.cumsum(is_eod, axis=1) - is_eod
            allowed = allowed & (segment[:, :, None] == segment[:, None, :])
        out["attention_mask"] = ~allowed[:, None]
    loss_mask[labels == pad] = 0.0
    tokens[tokens == pad] = 0
    labels[labels == pad] = 0
    inner = pos[:, 1:n] != pos[:, : n - 1]  # a document starts at column c + 1
    cu = [np.concatenate([[0], np.flatnonzero(row) + 1, [n]]).astype(np.int32) for row in inner]
    out.update(
        tokens=tokens, labels=labels, loss_mask=loss_mask, position_ids=position_ids, cu_seqlens=cu
    )
    return out
