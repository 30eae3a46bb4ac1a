"""GPT pretraining sequences: fixed-length token windows cut across document boundaries.

Megatron's GPT samples are ``seq_length`` tokens (``+ 1`` with ``add_extra_token_to_sequence``:
the labels are the tokens shifted by one) cut from the documents of a corpus laid end to end,
so a sample starts inside one document and may end several documents later. Which documents,
in which order, and where each sample starts is decided on the corpus index alone (the token
count of every sequence), here in the plan tier; the materialize tier reads the tokens
(:mod:`fpipe.storage.read.gpt_tokens`).

:class:`GPTSplitIndex` holds the order of one split (one corpus, or a weighted blend of
several); :func:`gpt_sequences` makes it a :class:`~fpipe.core.stage.View`, so the usual
stages give it exact resume and seek (``chain(repeat(view, 1), batch(b))``: the state is a
position, a seek is arithmetic). A ref of the view is ``(dataset, index)``: the corpus of the
blend and the row of its sample index; :meth:`GPTSplitIndex.pieces` turns a ref into its
lineage, the ``(sequence, offset, length)`` pieces the sample's tokens are read from.

:func:`megatron_splits` computes Megatron's own order (``--split``, ``--seed``, the sample
counts and the blend weights) with :mod:`fpipe.core.megatron_order`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from fpipe.core import megatron_order as mo
from fpipe.core.errors import ConfigError
from fpipe.core.records import Config, Refs
from fpipe.core.stage import View

__all__ = ["GPTSequencesConfig", "GPTSplitIndex", "gpt_sequences", "megatron_splits"]


@dataclasses.dataclass(frozen=True)
class GPTSplitIndex:
    """The order of one split: sample ``i`` is ``(dataset[i], row[i])``.

    ``orders``: one :class:`~fpipe.core.megatron_order.GPTOrder` per corpus of the blend;
    ``dataset_index`` / ``dataset_sample_index``: the blend's assignment (None for a single
    corpus without weights: sample ``i`` is sample ``i`` of corpus 0); ``lengths``: the token
    count of every sequence of each corpus; ``extra``: 1 when a sample reads one token more
    than ``seq_length``.
    """

    split: str
    orders: tuple[mo.GPTOrder, ...]
    lengths: tuple[np.ndarray, ...]
    seq_length: int
    extra: int
    dataset_index: np.ndarray | None = None
    dataset_sample_index: np.ndarray | None = None

    def __len__(self) -> int:
        if self.dataset_index is not None:
            return len(self.dataset_index)
        return len(self.orders[0])

    def locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(dataset, row)`` of the samples at ``positions``: the corpus and the row of its
        sample index (after the corpus's shuffle)."""
        positions = np.asarray(positions, dtype=np.int64)
        if self.dataset_index is None:
            return np.zeros(len(positions), np.int32), self.orders[0].shuffle_index[positions]
        assert self.dataset_sample_index is not None
        dataset = self.dataset_index[positions].astype(np.int32)
        within = self.dataset_sample_index[positions]
        rows = np.empty(len(positions), dtype=np.int64)
        for d in np.unique(dataset).tolist():
            at = dataset == d
            rows[at] = self.orders[d].shuffle_index[within[at]]
        return dataset, rows

    def pieces(self, dataset: int, row: int) -> list[tuple[int, int, int]]:
        """The lineage of a sample: ``(sequence, offset, length)`` per document piece, in
        order; their lengths add up to ``seq_length + extra`` (less only for a short final
        sample). Pieces of no token are left out."""
        order = self.orders[dataset]
        lengths = self.lengths[dataset]
        (p0, o0), (p1, o1) = order.sample_index[row].tolist(), order.sample_index[row + 1].tolist()
        docs = order.document_index[p0 : p1 + 1].tolist()
        out = []
        for k, doc in enumerate(docs):
            offset = o0 if k == 0 else 0
            end = o1 + self.extra if k == len(docs) - 1 else int(lengths[doc])
            if end > offset:
                out.append((doc, offset, end - offset))
        return out


class GPTSequencesConfig(Config, frozen=True):
    """A view of GPT samples: the split, its length in samples, the sequence length, whether
    a sample reads one extra token, and ``source_id`` (the corpora and the order's settings,
    so a restore over other corpora or another order is refused)."""

    split: str
    num_samples: int
    seq_length: int
    extra: int
    source_id: str = ""


def gpt_sequences(
    index: GPTSplitIndex, *, source_id: str = "", name: str = "gpt_sequences"
) -> View:
    """A view of the samples of one split in order: position ``p`` is sample ``p`` (a ref
    ``(dataset, index=row)`` with a ``tokens`` column, the tokens it reads).

    Example:
        >>> lengths = np.array([5, 7, 3, 9], dtype=np.int32)
        >>> order = mo.gpt_order(lengths, 0, 4, None, 4, seed=1)
        >>> index = GPTSplitIndex("train", (order,), (lengths,), 4, 1)
        >>> view = gpt_sequences(index)
        >>> view.size, len(view.gather(0, 0, np.array([0, 1])))
        (5, 2)
    """
    size = len(index)
    config = GPTSequencesConfig(
        split=index.split,
        num_samples=size,
        seq_length=index.seq_length,
        extra=index.extra,
        source_id=source_id,
    )
    width = index.seq_length + index.extra

    def gather(key, epoch, positions):
        dataset, rows = index.locate(positions)
        return Refs.wrap(
            {
                "index": rows,
                "dataset": dataset,
                "epoch": np.full(len(rows), epoch, dtype=np.int64),
                "tokens": np.full(len(rows), width, dtype=np.int64),
            }
        )

    return View(name=name, config=config, size=size, gather=gather)


def megatron_splits(
    lengths: Sequence[np.ndarray],
    *,
    split: str,
    num_samples: Sequence[int | None],
    seq_length: int,
    seed: int,
    weights: Sequence[float] | None = None,
    add_extra_token: bool = True,
    drop_last_partial_validation: bool = True,
    surplus: float = 0.005,
    only: str | None = None,
) -> dict[str, GPTSplitIndex]:
    """Megatron's order of each split present in ``split`` (``{"train": ..., "valid": ...}``),
    as ``BlendedMegatronDatasetBuilder(GPTDataset, num_samples, ...)`` builds it for
    ``--data-path`` with these corpora (``lengths``: each corpus's ``sequence_lengths``) and
    ``weights`` (None: unweighted).

    ``num_samples``: samples per split (train, valid, test), as Megatron's ``sizes``
    (``--train-samples`` or iterations times the global batch size; None: one epoch, only
    for a single corpus); ``surplus``: ``mid_level_dataset_surplus``; ``only``: compute
    this split alone (each split's order is independent of the others').
    """
    if not lengths:
        raise ConfigError("megatron_splits needs at least one corpus")
    if weights is not None and len(weights) != len(lengths):
        raise ConfigError(f"{len(weights)} weights for {len(lengths)} corpora")
    extra = int(bool(add_extra_token))
    bookends = mo.parse_split(split)
    sizes = list(num_samples) + [None] * (len(mo.SPLITS) - len(num_samples))
    single = len(lengths) == 1 and weights is None
    norm = mo.normalize(weights) if weights is not None else None
    out: dict[str, GPTSplitIndex] = {}
    for s, name in enumerate(mo.SPLITS):
        if bookends[s] is None or (only is not None and name != only):
            continue
        bounds = [mo.split_range(bookends[s], len(lens)) for lens in lengths]  # type: ignore[arg-type]
        drop = drop_last_partial_validation if name == "valid" else True
        size = sizes[s]
        if single:
            order = mo.gpt_order(
                lengths[0], *bounds[0], size, seq_length, seed, extra=extra, drop_last=drop
            )
            out[name] = GPTSplitIndex(name, (order,), (lengths[0],), seq_length, extra)
            continue
        wanted: list[int | None] = [None] * len(lengths)
        if norm is not None:
            if size is None:
                raise ConfigError("a weighted blend needs the number of samples of each split")
            wanted = list(mo.blend_sizes(norm, size, surplus))
            total = sum(mo.blend_sizes(norm, size))
            blend_weights = mo.normalize(norm)  # BlendedDataset normalizes again: same floats
        orders = tuple(
            mo.gpt_order(lens, b, e, want, seq_length, seed, extra=extra, drop_last=drop)
            for lens, (b, e), want in zip(lengths, bounds, wanted)
        )
        if norm is None:  # weights: the corpora's sizes, one epoch each
            counts = [len(o) for o in orders]
            total = sum(counts) if size is None else min(size, sum(counts))
            if size is None:
                raise ConfigError("an unweighted blend needs the number of samples of each split")
            blend_weights = mo.normalize(counts)
        dataset, within = mo.blending_indices(blend_weights, total)
        for d, order in enumerate(orders):
            asked = int(np.count_nonzero(dataset == d))
            if asked > len(order):
                raise ConfigError(
                    f"the {name} blend takes {asked} samples of corpus {d}, which has "
                    f"{len(order)}; raise the surplus"
                )
        out[name] = GPTSplitIndex(name, orders, tuple(lengths), seq_length, extra, dataset, within)
    return out
