"""Packed token sequences for variable-length ("varlen") attention.

:func:`varlen_pack` concatenates the token sequences of one pack and returns what
``flash_attn_varlen_func``-style kernels and position embeddings need so that packed samples
never attend to each other: ``cu_seqlens`` (int32 offsets of the samples), ``max_seqlen``,
``position_ids`` restarting at 0 for each sample, a ``segment_ids`` per token (the sample's
number in the pack, -1 on padding), and ``labels`` where no target crosses a sample boundary and
padding is ignored.

Example:
    >>> p = varlen_pack([[5, 6, 7], [8, 9]], pad_to=6)
    >>> p.input_ids.tolist(), p.cu_seqlens.tolist(), p.max_seqlen
    ([5, 6, 7, 8, 9, 0], [0, 3, 5], 3)
    >>> p.position_ids.tolist(), p.segment_ids.tolist()
    ([0, 1, 2, 0, 1, 0], [0, 0, 0, 1, 1, -1])
    >>> p.labels.tolist()  # next token within the sample; -100 at each end and on padding
    [6, 7, -100, 9, -100, -100]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch

from fpipe.samples.tensors import PinMemoryMixin

__all__ = ["VarlenPack", "stack_varlen", "varlen_pack"]


@dataclasses.dataclass(frozen=True)
class VarlenPack(PinMemoryMixin):
    """One pack (or, from :func:`stack_varlen`, a batch of packs) of concatenated samples;
    ``pack.to("cuda")`` and ``pack.pin_memory()`` return a new one, as for every batch.

    Attributes:
      input_ids: tokens, ``(L,)`` (or ``(B, L)``); padding after the last sample.
      labels: targets aligned with ``input_ids``; ``ignore_index`` where there is none.
      position_ids: position of each token in its own sample (0 on padding).
      segment_ids: sample number in the pack per token (-1 on padding).
      cu_seqlens: int32 ``[0, l0, l0 + l1, ...]`` over the real tokens (flattened over the
        batch for a stack, so row ``b`` starts at ``b * L``).
      max_seqlen: the longest sample.
    """

    input_ids: torch.Tensor
    labels: torch.Tensor
    position_ids: torch.Tensor
    segment_ids: torch.Tensor
    cu_seqlens: torch.Tensor
    max_seqlen: int


def varlen_pack(
    sequences: Sequence,
    labels: Sequence | None = None,
    *,
    pad_to: int | None = None,
    pad_id: int = 0,
    ignore_index: int = -100,
    shifted: bool = True,
) -> VarlenPack:
    """Concatenate token sequences into one pack for varlen attention.

    Args:
      sequences: token ids per sample (lists, numpy arrays or 1-D tensors).
      labels: per-sample targets aligned with the tokens (``ignore_index`` for tokens without a
        loss, e.g. prompts); default: the tokens themselves.
      pad_to: total length to pad to (``ValueError`` if the samples are longer); None: no pad.
      shifted: True: ``labels[t]`` is the target of position ``t`` (the next token of the same
        sample), so each sample's last position gets ``ignore_index``. False (the Hugging Face
        convention, the model shifts itself): labels are aligned with the tokens and each
        sample's *first* position gets ``ignore_index``, so the shifted loss never predicts one
        sample's first token from the previous sample.
    """
    seqs = [np.asarray(s, dtype=np.int64).reshape(-1) for s in sequences]
    lens = np.asarray([len(s) for s in seqs], dtype=np.int64)
    total = int(lens.sum())
    length = total if pad_to is None else int(pad_to)
    if length < total:
        raise ValueError(f"samples hold {total} tokens, more than pad_to={pad_to}")
    starts = np.concatenate(([0], np.cumsum(lens)))
    ids = np.full(length, pad_id, dtype=np.int64)
    ids[:total] = np.concatenate(seqs) if seqs else np.zeros(0, dtype=np.int64)
    if labels is None:
        lab_real = ids[:total].copy()
    else:
        lab = [np.asarray(x, dtype=np.int64).reshape(-1) for x in labels]
        got = [len(x) for x in lab]
        if got != lens.tolist():
            bad = next((i for i, (a, b) in enumerate(zip(got, lens.tolist())) if a != b), None)
            what = (
                f"{len(lab)} label sequences for {len(seqs)} samples"
                if bad is None
                else f"sample {bad} has {got[bad]} labels for {lens[bad]} tokens"
            )
            raise ValueError(f"labels must have the same lengths as the sequences: {what}")
        lab_real = np.concatenate(lab) if lab else np.zeros(0, dtype=np.int64)
    out = np.full(length, ignore_index, dtype=np.int64)
    nonempty = lens > 0
    if shifted:
        out[: max(total - 1, 0)] = lab_real[1:]
        out[starts[1:][nonempty] - 1] = ignore_index  # the last token of each sample
    else:
        out[:total] = lab_real
        out[starts[:-1][nonempty]] = ignore_index  # the first token of each sample
    segment = np.full(length, -1, dtype=np.int64)
    segment[:total] = np.repeat(np.arange(len(seqs), dtype=np.int64), lens)
    position = np.zeros(length, dtype=np.int64)
    position[:total] = np.arange(total, dtype=np.int64) - np.repeat(starts[:-1], lens)
    return VarlenPack(
        input_ids=torch.from_numpy(ids),
        labels=torch.from_numpy(out),
        position_ids=torch.from_numpy(position),
        segment_ids=torch.from_numpy(segment),
        cu_seqlens=torch.from_numpy(starts.astype(np.int32)),
        max_seqlen=int(lens.max()) if len(lens) else 0,
    )


def stack_varlen(packs: Sequence[VarlenPack]) -> VarlenPack:
    """Stack packs of one length into a batch: tensors ``(B, L)``, and ``cu_seqlens`` over the
    flattened batch that partition all ``B * L`` positions: a row's padding is a segment of its
    own (its labels are ignored), so a varlen kernel over ``input_ids.view(-1)`` never mixes
    rows. ``max_seqlen`` covers the padding segments too."""
    if not packs:
        raise ValueError("stack_varlen needs at least one pack")
    if len({p.input_ids.shape[0] for p in packs}) > 1:
        raise ValueError("stack_varlen needs packs of one length (use varlen_pack(pad_to=...))")
    length = packs[0].input_ids.shape[0]
    cu, longest = [0], 0
    for b, p in enumerate(packs):
        bounds = (p.cu_seqlens[1:] + b * length).tolist()
        real_end = bounds[-1] if bounds else b * length
        cu.extend(bounds)
        if real_end < (b + 1) * length:  # the row's padding
            cu.append((b + 1) * length)
            longest = max(longest, (b + 1) * length - real_end)
        longest = max(longest, p.max_seqlen)
    return VarlenPack(
        input_ids=torch.stack([p.input_ids for p in packs]),
        labels=torch.stack([p.labels for p in packs]),
        position_ids=torch.stack([p.position_ids for p in packs]),
        segment_ids=torch.stack([p.segment_ids for p in packs]),
        cu_seqlens=torch.tensor(cu, dtype=torch.int32),
        max_seqlen=longest,
    )
