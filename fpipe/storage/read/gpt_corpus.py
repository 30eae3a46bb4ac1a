"""GPT sequences of a Megatron corpus as a dataset: fixed-length token windows across documents.

``open_dataset(prefix, sequence_length=4096, eod_token=0, ...)`` (a metadataset entry's
``sequence_length:``, see :mod:`fpipe.storage.config.metadataset_entries`) opens a corpus whose
samples are Megatron's GPT samples: ``sequence_length`` tokens (plus one with
``add_extra_token_to_sequence``, the labels' last) cut from the split's sequences laid end to
end, so one sample may span several documents. The dataset's splits (``train``, ``val`` /
``valid``, ``test``) are Megatron's ``split`` string's ranges of sequences, one "shard" each.

Sample ``j`` of a split reads the tokens ``[r * S, r * S + S + extra)`` of its *stream*, the
split's sequences in a document order, where

- ``order="fpipe"`` (default): the stream is the split's sequences in corpus order, one pass,
  ``r = j``: fpipe's plan shuffles the samples (slice and window shuffles, blends, epochs);
- ``order="megatron"``: the stream and ``r`` are megatron-core ``GPTDataset``'s (its document
  index repeated for ``num_samples`` and shuffled, its shuffle index) for ``seed``: sample ``j``
  is Megatron's sample ``j`` of the split, token for token.

The plan reads only the counts (the ``tokens`` column is ``sequence_length`` for every
sample, what ``blend_unit: tokens`` weighs); a worker computes the stream once per open and
reads each batch at once: :meth:`GPTReader.read_many` finds every token's document by
one binary search and builds the fields of the whole batch with numpy
(:mod:`fpipe.storage.read.gpt_tokens`, as :class:`~fpipe.datasets.megatron_gpt.MegatronGPT` does).
A sample is cooked into a :class:`~fpipe.samples.GPTSample`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from fpipe.core import megatron_order as mo
from fpipe.core.errors import BadSampleError, ConfigError
from fpipe.decode.limits import DecodeLimits
from fpipe.storage.config.dataset_yaml import DatasetConfig, SplitConfig
from fpipe.storage.read.gpt_tokens import GPTFields, Pieces, TokenGather, TokenStream, batch_fields
from fpipe.storage.read.record import ArrayStore, IndexRecord, ShardEntry

__all__ = [
    "GPTOptions",
    "GPTReader",
    "GPT_OPTIONS",
    "gpt_dataset_parts",
    "is_gpt",
]

#: fpipe's split names of Megatron's three splits (``val`` and ``valid`` name the same one).
_SPLIT_NAMES = {"train": ("train",), "valid": ("val", "valid"), "test": ("test",)}
_ORDERS = ("fpipe", "megatron")
_MEMBERS = {
    "tokens": "tokens.int64",
    "labels": "tokens.int64",
    "loss_mask": "tokens.float32",
    "position_ids": "tokens.int64",
    "cu_seqlens": "tokens.int32",
    "pieces": "tokens.int64",
}
_FIELD_MAP = {m: m for m in _MEMBERS}


@dataclasses.dataclass(frozen=True)
class GPTOptions:
    """What makes GPT samples of a corpus (the open arguments of the same names).

    ``sequence_length``: tokens a sample trains on; ``add_extra_token_to_sequence``: read one
    more (the last label; Megatron's default); ``eod_token`` / ``pad_token``: the tokenizer's
    end-of-document and padding tokens; ``eod_mask_loss``, ``reset_position_ids``: Megatron's
    options; ``order``, ``split``, ``seed``, ``num_samples``: see the module docstring
    (``num_samples``: samples of train, valid, test for ``order="megatron"``, an int for train
    alone; None: one epoch of the split).
    """

    sequence_length: int
    eod_token: int
    add_extra_token_to_sequence: bool = True
    pad_token: int = -1
    eod_mask_loss: bool = False
    reset_position_ids: bool = False
    order: str = "fpipe"
    split: str = "1,0,0"
    seed: int = 1234
    num_samples: tuple[int | None, ...] = ()

    @property
    def extra(self) -> int:
        return int(bool(self.add_extra_token_to_sequence))

    @property
    def fields(self) -> GPTFields:
        """What shapes a sample's fields (:func:`~fpipe.storage.read.gpt_tokens.batch_fields`)."""
        return GPTFields(
            eod=self.eod_token,
            pad=self.pad_token,
            extra=self.extra,
            reset_position_ids=self.reset_position_ids,
            eod_mask_loss=self.eod_mask_loss,
        )

    @classmethod
    def of(cls, path, given: dict[str, Any]) -> GPTOptions:
        """The options from open arguments, checked (a ConfigError naming ``path``)."""
        if given.get("eod_token") is None:
            raise ConfigError(f"{path}: GPT sequences need eod_token (the end-of-document token)")
        n = int(given["sequence_length"])
        if n < 2:
            raise ConfigError(f"{path}: sequence_length must be >= 2, got {n}")
        order = given.get("order") or "fpipe"
        if order not in _ORDERS:
            raise ConfigError(f"{path}: order must be one of {_ORDERS}, got {order!r}")
        counts = given.get("num_samples")
        if counts is None:
            counts = ()
        elif isinstance(counts, int):
            counts = (counts,)
        counts = tuple(None if c is None else int(c) for c in counts)
        if counts and order != "megatron":
            raise ConfigError(
                f"{path}: num_samples sets Megatron's epochs (order: megatron); fpipe's order "
                "reads each split once per epoch (num_epochs repeats it)"
            )
        mo.parse_split(str(given.get("split") or "1,0,0"))  # refused here if malformed
        return cls(
            sequence_length=n,
            eod_token=int(given["eod_token"]),
            add_extra_token_to_sequence=bool(given.get("add_extra_token_to_sequence", True)),
            pad_token=int(given.get("pad_token", -1)),
            eod_mask_loss=bool(given.get("eod_mask_loss", False)),
            reset_position_ids=bool(given.get("reset_position_ids", False)),
            order=order,
            split=str(given.get("split") or "1,0,0"),
            seed=int(given.get("seed", 1234)),
            num_samples=counts,
        )


#: The open arguments of GPT sequences (``sequence_length`` turns them on).
GPT_OPTIONS = tuple(f.name for f in dataclasses.fields(GPTOptions))


def _sample_count(tokens: int, options: GPTOptions, wanted: int | None) -> int:
    """Samples of a split of ``tokens`` tokens (Megatron's count, for its epochs)."""
    epochs = mo.num_epochs(tokens, wanted, options.sequence_length, options.extra)
    return max(0, (epochs * tokens - options.extra) // options.sequence_length)


class GPTReader:
    """GPT samples of one corpus (see the module docstring): ``splits`` is ``[(name, begin
    sequence, end sequence, samples)]`` in index order."""

    def __init__(self, name: str, corpus, options: GPTOptions, splits):
        self.name = name
        self.corpus = corpus
        self.options = options
        self.splits = splits
        self.starts = np.cumsum([0] + [s[3] for s in splits], dtype=np.int64)
        self._streams: dict[int, TokenStream] = {}
        self._gather = TokenGather(corpus)

    def order_tag(self) -> str:
        """What decides which tokens sample ``i`` holds, for the plan's fingerprint (a restore
        over another sequence length, order or seed is refused)."""
        o = self.options
        return (
            f"[gpt S={o.sequence_length}+{o.extra} order={o.order} split={o.split} "
            f"seed={o.seed} n={list(o.num_samples)}]"
        )

    def _locate(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = np.searchsorted(self.starts, idx, side="right") - 1
        return s, idx - self.starts[s]

    def key(self, i: int) -> str:
        s, j = self._locate(np.array([i]))
        return f"{self.name}#{self.splits[int(s[0])][0]}/{int(j[0])}"

    def stream(self, s: int) -> TokenStream:
        """The stream of split ``s`` (computed on first use: Megatron's shuffles for its order)."""
        got = self._streams.get(s)
        if got is not None:
            return got
        split, begin, end, count = self.splits[s]
        lengths = self.corpus.sequence_lengths
        o = self.options
        if o.order == "megatron":
            i = mo.SPLITS.index(split)
            wanted = o.num_samples[i] if i < len(o.num_samples) else None
            order = mo.gpt_order(
                lengths, begin, end, wanted, o.sequence_length, o.seed, extra=o.extra
            )
            if len(order) != count:  # the count the plan used is the order's
                raise ConfigError(f"{self.name}: {split}: {len(order)} samples, {count} planned")
            got = TokenStream(order.document_index, lengths, order.shuffle_index)
        else:
            got = TokenStream(np.arange(begin, end, dtype=np.int64), lengths, None)
        self._streams[s] = got
        return got

    def _pieces(self, idx: np.ndarray) -> Pieces:
        """The document pieces of samples ``idx`` (:meth:`TokenStream.pieces`)."""
        n, width = self.options.sequence_length, self.options.sequence_length + self.options.extra
        s_of, j_of = self._locate(idx)
        parts = []
        for s in np.unique(s_of).tolist():
            at = np.flatnonzero(s_of == s)
            st = self.stream(s)
            got = st.pieces(j_of[at] if st.rows is None else st.rows[j_of[at]], n, width)
            parts.append(dataclasses.replace(got, row=at[got.row]))
        if len(parts) == 1:
            return parts[0]
        fields = [f.name for f in dataclasses.fields(Pieces)]
        joined = {f: np.concatenate([getattr(p, f) for p in parts]) for f in fields}
        order = np.lexsort((joined["col"], joined["row"]))
        return Pieces(**{f: v[order] for f, v in joined.items()})

    def pieces(self, i: int) -> list[tuple[int, int, int]]:
        """Lineage of sample ``i``: ``(sequence, offset, length)`` of each document piece."""
        return self._pieces(np.array([i], dtype=np.int64)).of(0)

    def read(
        self, i: int, exts: frozenset[str] | None = None, limits: DecodeLimits | None = None
    ) -> dict[str, bytes]:
        key, got = self.read_many(np.array([i], dtype=np.int64), exts, limits)[0]
        if isinstance(got, Exception):
            raise got
        return got

    def read_many(self, idx, exts=None, limits=None) -> list[tuple[str, Any]]:
        """``(key, members)`` of samples ``idx``: one gather and numpy fields for them all."""
        idx = np.asarray(idx, dtype=np.int64)
        keys = [self.key(int(i)) for i in idx]
        try:
            pieces = self._pieces(idx)
            width = self.options.sequence_length + self.options.extra
            text = self._gather.read(
                pieces, len(idx), width, self.options.pad_token, keys.__getitem__
            )
        except BadSampleError as e:
            return [(k, e) for k in keys]
        fields = batch_fields(text, pieces.positions(len(idx), width), self.options.fields)
        out = []
        for b, k in enumerate(keys):
            members = {m: v[b].tobytes() for m, v in fields.items() if m != "cu_seqlens"}
            members["cu_seqlens"] = fields["cu_seqlens"][b].tobytes()
            members["pieces"] = np.array(pieces.of(b), dtype=np.int64).tobytes()
            out.append((k, members))
        return out

    def decode_exts(self, i: int) -> dict[str, str]:
        return _MEMBERS

    def av_names(self, field: str, i: int) -> tuple[str, ...]:
        return ()


def gpt_dataset_parts(name: str, corpus, given: dict[str, Any], path):
    """``(reader, record, config, split config, arrays, open args)`` of the GPT sequences
    of ``corpus`` (prefix name ``name``) for the open arguments ``given``."""
    options = GPTOptions.of(path, given)
    lengths = corpus.sequence_lengths
    bookends = mo.parse_split(options.split)
    splits = []
    for s, split in enumerate(mo.SPLITS):
        if bookends[s] is None:
            continue
        begin, end = mo.split_range(bookends[s], len(lengths))  # type: ignore[arg-type]
        tokens = int(lengths[begin:end].sum(dtype=np.int64))
        wanted = options.num_samples[s] if s < len(options.num_samples) else None
        splits.append((split, begin, end, _sample_count(tokens, options, wanted)))
    reader = GPTReader(name, corpus, options, splits)
    shards = tuple(ShardEntry(f"{name}.bin:{s[0]}", s[3], corpus.bin_bytes) for s in splits)
    record = IndexRecord(
        layout="megatron",
        num_samples=int(reader.starts[-1]),
        shards=shards,
        columns={"tokens": "int64", "bytes": "int64"},
        source="megatron-gpt",
    )
    parts = {n: [sh.name] for (split, *_), sh in zip(splits, shards) for n in _SPLIT_NAMES[split]}
    split_config = SplitConfig(split_parts=parts)
    config = DatasetConfig(sample_type="GPTSample", field_map=dict(_FIELD_MAP))
    total = int(reader.starts[-1])

    def make(file: str) -> np.ndarray:
        if file == "shard_id.npy":
            return np.repeat(np.arange(len(splits), dtype=np.int32), [s[3] for s in splits])
        if file == "columns/tokens.npy":
            return np.full(total, options.sequence_length, dtype=np.int64)
        if file == "columns/bytes.npy":
            width = options.sequence_length + options.extra
            return np.full(total, width * corpus.dtype.itemsize, dtype=np.int64)
        raise KeyError(file)

    args = {k: getattr(options, k) for k in GPT_OPTIONS}
    args["num_samples"] = options.num_samples or None
    return reader, record, config, split_config, ArrayStore(make=make), args


def is_gpt(open_args: dict[str, Any]) -> bool:
    """Whether open arguments ask for GPT sequences (``sequence_length`` given)."""
    return open_args.get("sequence_length") is not None
