"""What a GPT sample is made into: Megatron ``GPTDataset.__getitem__``'s fields.

From the ``seq_length (+ 1)`` tokens of a sample (read from its pieces, see
:mod:`fpipe.plan.gpt_sequences`): ``tokens`` and ``labels`` (the next token of each),
``loss_mask`` (0 on EOD tokens with ``eod_mask_loss``, and on padding), ``position_ids``
(restarting after each EOD with ``reset_position_ids``), ``attention_mask`` (causal, split at
each EOD with ``reset_attention_mask``; True where attention is *not* allowed, as Megatron's),
and ``cu_seqlens``: where each document of the sample starts in ``tokens``, then
``seq_length`` (int32), for variable-length attention kernels.

Vectorized: a segment id per token (EODs before it) replaces Megatron's loop over EODs.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

__all__ = ["GPTFields", "cu_seqlens", "gpt_fields", "read_tokens"]


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


def read_tokens(corpora, pieces, width: int, pad: int) -> np.ndarray:
    """The tokens of a sample (int64, ``width`` long): its pieces ``(sequence, offset,
    length)`` of corpus ``corpora`` one after the other, padded with ``pad``."""
    out = np.full(width, pad, dtype=np.int64)
    at = 0
    for seq, offset, length in pieces:
        out[at : at + length] = corpora.read(seq, offset, length)
        at += length
    return out


def cu_seqlens(piece_lengths, seq_length: int) -> np.ndarray:
    """Where each document starts in the sample's ``seq_length`` input tokens, then
    ``seq_length`` (int32): the pieces' boundaries that fall inside the input."""
    bounds = np.cumsum(np.asarray(piece_lengths, dtype=np.int64))
    inner = bounds[bounds < seq_length]
    return np.concatenate([[0], inner, [seq_length]]).astype(np.int32)


def gpt_fields(text: np.ndarray, options: GPTFields) -> dict[str, torch.Tensor]:
    """Megatron's fields of one sample from its ``seq_length + extra`` tokens ``text``."""
    text_t = torch.from_numpy(np.ascontiguousarray(text, dtype=np.int64))
    if options.extra:
        tokens = text_t[:-1].clone()
        labels = text_t[1:].clone()
    else:
        tokens = text_t.clone()
        labels = torch.roll(text_t, shifts=-1, dims=0)
        labels[-1] = options.pad
    n = tokens.numel()
    is_eod = tokens == options.eod
    loss_mask = torch.ones(n, dtype=torch.float)
    if options.eod_mask_loss:
        loss_mask[is_eod] = 0.0
    # segment of each token: the EODs strictly before it
    segment = torch.cumsum(is_eod.to(torch.int64), 0) - is_eod.to(torch.int64)
    position_ids = torch.arange(n, dtype=torch.long)
    if options.reset_position_ids:
        starts = torch.zeros(n, dtype=torch.long)
        after_eod = torch.nonzero(is_eod).flatten() + 1
        starts_of = torch.cat([torch.zeros(1, dtype=torch.long), after_eod])
        starts = starts_of[segment]
        position_ids = position_ids - starts
    out = {"tokens": tokens, "labels": labels}
    if options.create_attention_mask:
        allowed = torch.ones((n, n), dtype=torch.bool).tril()
        if options.reset_attention_mask:
            allowed &= segment[:, None] == segment[None, :]
        out["attention_mask"] = (~allowed).unsqueeze(0)
    loss_mask[labels == options.pad] = 0.0
    tokens[tokens == options.pad] = 0
    labels[labels == options.pad] = 0
    out["loss_mask"] = loss_mask
    out["position_ids"] = position_ids
    return out
