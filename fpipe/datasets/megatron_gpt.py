"""Megatron GPT pretraining data from ``.bin/.idx`` corpora, in Megatron's order.

:class:`MegatronGPT` takes Megatron's arguments (``--data-path`` prefixes and weights,
``--split``, ``--seq-length``, ``--seed``, the samples of each split) and gives, per split:

- ``view(split)``: the plan-tier view of its samples (:func:`fpipe.plan.gpt_sequences`);
- ``plan(split, batch_size)``: a :class:`~fpipe.core.Pipeline` of batch recipes over it, with
  fpipe's exact resume (``snapshot`` / ``restore``) and seek (``skip`` / ``advance``);
- ``sample(split, i)`` / ``materialize(split, recipe)``: Megatron ``GPTDataset``'s fields
  plus ``cu_seqlens``, a batch at once: one binary search finds every token, one read per
  corpus gets them and numpy makes the fields (:mod:`fpipe.storage.read.gpt_tokens`, as the
  ``sequence_length`` datasets of a metadataset do), written into one block of memory (one
  shared-memory segment in a DataLoader worker, so the batch crosses to the main process as
  one handle, not one segment, copy and descriptor per field);
- ``lineage(split, i)``: which corpus, sequences and token ranges made sample ``i``.

Sample ``i`` of a split equals sample ``i`` of megatron-core's
``BlendedMegatronDatasetBuilder(GPTDataset, ...)`` for the same arguments, token for token.
A split's order is computed in memory the first time it is used (nothing is cached on disk).
The object pickles small (corpora reopen by path; orders are recomputed), for DataLoader
workers.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from fpipe.core import Pipeline, chain
from fpipe.core.errors import ConfigError
from fpipe.core.megatron_order import SPLITS
from fpipe.encode.batch_memory import in_worker_process, tensor_block
from fpipe.plan import batch, repeat
from fpipe.plan.gpt_sequences import GPTSplitIndex, gpt_sequences, megatron_splits
from fpipe.storage.read.gpt_tokens import GPTFields, TokenGather, TokenStream, batch_fields
from fpipe.storage.read.megatron_indexed import IndexedCorpus

__all__ = ["MegatronGPT", "parse_data_path"]

#: The torch dtype of each numpy dtype of a batch's fields.
_TORCH_TYPES = {
    np.dtype(np.int64): torch.int64,
    np.dtype(np.int32): torch.int32,
    np.dtype(np.float32): torch.float32,
    np.dtype(bool): torch.bool,
}


def parse_data_path(data_path: Sequence[str] | str) -> tuple[list[str], list[float] | None]:
    """Megatron's ``--data-path``: ``["30", "a", "70", "b"]`` (weights and prefixes) or
    ``["a", "b"]`` (prefixes) -> ``(prefixes, weights or None)``."""
    items = data_path.split() if isinstance(data_path, str) else list(data_path)
    if len(items) % 2 == 0 and items:
        try:
            weights = [float(w) for w in items[0::2]]
        except ValueError:
            return items, None
        return list(items[1::2]), weights
    return items, None


class MegatronGPT:
    """Megatron's GPT samples of ``prefixes`` (see the module docstring).

    Args:
      prefixes: corpus prefixes (``path/name`` for ``name.bin`` / ``name.idx``), or
        Megatron's ``--data-path`` list with weights (``["30", "a", "70", "b"]``).
      weights: blend weights (None: from ``prefixes`` if it holds them, else unweighted).
      split: ``--split`` (``"969,30,1"``).
      num_samples: samples of (train, valid, test): ``--train-samples`` (or
        ``--train-iters`` x ``--global-batch-size``) and the evaluation samples Megatron
        derives, as its ``train_valid_test_num_samples``.
      seq_length, seed: ``--seq-length``, ``--seed``.
      eod, pad: the tokenizer's end-of-document and padding tokens.
      add_extra_token: ``add_extra_token_to_sequence`` (Megatron's default True).
      reset_position_ids, reset_attention_mask, eod_mask_loss, create_attention_mask:
        Megatron's options of the same names.
    """

    def __init__(
        self,
        prefixes: Sequence[str],
        *,
        split: str = "969,30,1",
        num_samples: Sequence[int | None] = (None, None, None),
        seq_length: int,
        seed: int = 1234,
        eod: int,
        weights: Sequence[float] | None = None,
        pad: int = -1,
        add_extra_token: bool = True,
        reset_position_ids: bool = False,
        reset_attention_mask: bool = False,
        eod_mask_loss: bool = False,
        create_attention_mask: bool = False,
        drop_last_partial_validation: bool = True,
        surplus: float = 0.005,
    ):
        if weights is None:
            prefixes, weights = parse_data_path(prefixes)
        self.prefixes = [os.fspath(p) for p in prefixes]
        self.weights = None if weights is None else [float(w) for w in weights]
        self.split = split
        self.num_samples = tuple(num_samples)
        self.seq_length = int(seq_length)
        self.seed = int(seed)
        self.fields = GPTFields(
            eod=int(eod),
            pad=int(pad),
            extra=int(bool(add_extra_token)),
            reset_position_ids=reset_position_ids,
            reset_attention_mask=reset_attention_mask,
            eod_mask_loss=eod_mask_loss,
            create_attention_mask=create_attention_mask,
        )
        self._options = dict(
            drop_last_partial_validation=drop_last_partial_validation, surplus=surplus
        )
        self.corpora = [IndexedCorpus(p) for p in self.prefixes]
        self._gathers = [TokenGather(c) for c in self.corpora]
        self._splits: dict[str, GPTSplitIndex] | None = None
        self._streams: dict[tuple[str, int], TokenStream] = {}

    def __getstate__(self) -> dict[str, Any]:  # workers recompute the orders; no arrays sent
        state = dict(self.__dict__)
        state["_splits"] = None
        state["_streams"] = {}
        return state

    @property
    def source_id(self) -> str:
        """What the order depends on, for the view's fingerprint."""
        names = ",".join(os.path.basename(p) for p in self.prefixes)
        sizes = ",".join(str(len(c)) for c in self.corpora)
        return (
            f"megatron:{names}:{sizes}:w={self.weights}:split={self.split}:"
            f"n={self.num_samples}:seed={self.seed}"
        )

    def index(self, split: str) -> GPTSplitIndex:
        """The order of ``split`` (``"train"``, ``"valid"`` or ``"test"``)."""
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {SPLITS}, got {split!r}")
        if self._splits is None:
            self._splits = {}
        if split not in self._splits:
            self._splits.update(
                megatron_splits(
                    [c.sequence_lengths for c in self.corpora],
                    split=self.split,
                    num_samples=self.num_samples,
                    seq_length=self.seq_length,
                    seed=self.seed,
                    weights=self.weights,
                    add_extra_token=bool(self.fields.extra),
                    only=split,
                    **self._options,  # type: ignore[arg-type]
                )
            )
        if split not in self._splits:
            raise ConfigError(f"split {self.split!r} gives the {split} split no share")
        return self._splits[split]

    def __len__(self) -> int:
        return len(self.index("train"))

    def view(self, split: str = "train"):
        """The plan-tier view of ``split``'s samples."""
        return gpt_sequences(self.index(split), source_id=f"{self.source_id}:{split}")

    def plan(self, split: str = "train", batch_size: int = 1, num_epochs: int | None = 1):
        """A pipeline of batch recipes of ``batch_size`` consecutive samples of ``split``."""
        return Pipeline(chain(repeat(self.view(split), num_epochs), batch(batch_size)), seed=0)

    def lineage(self, split: str, i: int) -> dict[str, Any]:
        """Sample ``i``: its corpus (prefix), row, and ``(sequence, offset, length)`` pieces."""
        index = self.index(split)
        dataset, rows = index.locate(np.array([i]))
        d, row = int(dataset[0]), int(rows[0])
        return {"prefix": self.prefixes[d], "row": row, "pieces": index.pieces(d, row)}

    def _stream(self, split: str, d: int) -> TokenStream:
        """Corpus ``d``'s documents of ``split`` laid end to end (its order's document index)."""
        got = self._streams.get((split, d))
        if got is None:
            index = self.index(split)
            got = TokenStream(index.orders[d].document_index, index.lengths[d])
            self._streams[(split, d)] = got
        return got

    def _batch(
        self, split: str, dataset: np.ndarray, rows: np.ndarray, shared: bool = False
    ) -> dict[str, Any]:
        """The fields of the samples ``(dataset, row)``: each field ``(B, ...)``, ``cu_seqlens``
        a list (one tensor per sample, as their lengths differ); with ``shared``, in one
        shared-memory block (a batch a DataLoader worker sends as it is)."""
        n, width = self.seq_length, self.seq_length + self.fields.extra
        text = np.empty((len(rows), width), dtype=np.int64)
        pos = np.empty_like(text)
        for d in np.unique(dataset).tolist():
            at = np.flatnonzero(dataset == d)
            pieces = self._stream(split, d).pieces(rows[at], n, width)

            def key(b: int, d=d, at=at) -> str:
                return f"{os.path.basename(self.prefixes[d])}:{split}/row{int(rows[at[b]])}"

            text[at] = self._gathers[d].read(pieces, len(at), width, self.fields.pad, key)
            pos[at] = pieces.positions(len(at), width)
        tensors: dict[str, torch.Tensor] = {}

        def empty(specs):  # the fields in one block
            got = tensor_block(
                {k: (shape, _TORCH_TYPES[dt]) for k, (shape, dt) in specs.items()},
                shared,
            )
            tensors.update(got)
            return {k: t.numpy() for k, t in got.items()}

        fields = batch_fields(text, pos, self.fields, empty)
        out: dict[str, Any] = {k: tensors[k] for k in fields if k != "cu_seqlens"}
        out["cu_seqlens"] = list(
            torch.split(tensors["cu_seqlens"], [len(c) for c in fields["cu_seqlens"]])
        )
        return out

    def sample(self, split: str, i: int) -> dict[str, torch.Tensor]:
        """Sample ``i`` of ``split``: Megatron's fields plus ``cu_seqlens``."""
        dataset, rows = self.index(split).locate(np.array([i]))
        return {k: v[0] for k, v in self._batch(split, dataset, rows).items()}

    def materialize(self, split: str, recipe) -> dict[str, Any]:
        """The batch of a recipe of :meth:`plan`: each field stacked (``cu_seqlens``: a list,
        one tensor per sample, as their lengths differ). The fields but ``attention_mask``
        are views of one block (shared memory in a DataLoader worker): ``.clone()`` one to
        keep it without the others."""
        refs = recipe.refs
        dataset, rows = np.asarray(refs.dataset), np.asarray(refs.index, np.int64)
        return self._batch(split, dataset, rows, shared=in_worker_process())
