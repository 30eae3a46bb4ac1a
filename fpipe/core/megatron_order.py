"""Megatron's order of GPT samples, computed in memory: a compatibility mode.

megatron-core's ``BlendedMegatronDatasetBuilder(GPTDataset, ...)`` decides which tokens make
GPT sample ``i`` of each split with four indices, built once and cached on disk as ``.npy``
files (the sample index by a C++ helper):

- the **split**: ``--split "969,30,1"`` gives each split a range of the corpus's *sequences*
  (``[round(a * n), round(b * n))`` for the split's bookends ``(a, b)``);
- the **document index**: the split's sequences repeated for as many epochs as the requested
  samples need, shuffled with ``numpy.random.RandomState(seed)`` (the last epoch shuffled on
  its own when it is used less than 80%);
- the **sample index**: the documents laid end to end and cut every ``seq_length`` tokens;
  row ``k`` is ``(position in the document index, token offset)`` where sample ``k`` starts
  (a sample reads ``seq_length + 1`` tokens with ``add_extra_token_to_sequence``, so it shares
  its last token with the next sample's first);
- the **shuffle index**: a permutation of the samples from the same RandomState;
- for a weighted blend, the **blending indices**: sample ``i`` of the blend is sample
  ``dataset_sample_index[i]`` of dataset ``dataset_index[i]``, each dataset chosen greedily
  where the blend lags most behind its weight.

The functions here compute the same arrays as pure functions of (seed, sequence lengths,
split, number of samples, sequence length): the RandomState calls are Megatron's (that *is*
its documented order, and reproducing it needs the same draws), made on a RandomState of
their own, never on global state; the sample index and the blending indices are vectorized
numpy instead of loops. Nothing is written to disk.
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np

from fpipe.core.errors import ConfigError

__all__ = [
    "GPTOrder",
    "SPLITS",
    "blend_sizes",
    "blending_indices",
    "document_index",
    "gpt_order",
    "normalize",
    "num_epochs",
    "parse_split",
    "sample_index",
    "shuffle_index",
    "split_range",
]

#: Megatron's split names, in the order of ``--split``.
SPLITS = ("train", "valid", "test")
#: The last epoch is shuffled on its own when less than this share of it is used.
_SEPARATE_FINAL_EPOCH_BELOW = 0.80


def normalize(weights) -> list[float]:
    """Weights divided by their sum in float64 (Megatron's ``normalize``: its exact floats)."""
    w = np.asarray(weights, dtype=np.float64)
    return (w / np.sum(w)).tolist()


def parse_split(split: str) -> list[tuple[float, float] | None]:
    """``"969,30,1"`` -> the bookends of train, valid and test in ``[0, 1]`` (None: empty).

    The numbers are normalized; missing ones are 0 (``"1"`` is ``"1,0,0"``).
    """
    found = [float(x) for x in re.findall(r"[.0-9]+", split)]
    if not found or len(found) > len(SPLITS) or sum(found) <= 0:
        raise ConfigError(
            f"split {split!r}: expected up to {len(SPLITS)} non-negative numbers with a positive "
            'sum, such as "969,30,1"'
        )
    vector = normalize(found + [0.0] * (len(SPLITS) - len(found)))
    edges: list[float] = [0]
    for share in vector:  # summed one by one, as Megatron does: the same float bookends
        edges.append(edges[-1] + share)
    return [(a, b) if b > a else None for a, b in zip(edges[:-1], edges[1:])]


def split_range(bookends: tuple[float, float], num_sequences: int) -> tuple[int, int]:
    """The sequences ``[begin, end)`` of a corpus of ``num_sequences`` in a split."""
    return int(round(bookends[0] * float(num_sequences))), int(
        round(bookends[1] * float(num_sequences))
    )


def num_epochs(tokens_per_epoch: int, num_samples: int | None, seq_length: int, extra: int) -> int:
    """Epochs of the split's documents that ``num_samples`` samples need (1 for None)."""
    if num_samples is None:
        return 1
    if tokens_per_epoch <= 0:
        raise ConfigError(f"{num_samples} samples asked of a split that holds no token")
    wanted = num_samples * seq_length + extra
    return max(1, -(-wanted // tokens_per_epoch))


def document_index(
    documents: np.ndarray, epochs: int, rng: np.random.RandomState, separate_final_epoch: bool
) -> np.ndarray:
    """``documents`` repeated ``epochs`` times and shuffled by ``rng`` (int32), the last epoch
    on its own when ``separate_final_epoch``."""
    if separate_final_epoch and epochs > 1:
        first = document_index(documents, epochs - 1, rng, False)
        return np.concatenate([first, document_index(documents, 1, rng, False)])
    out = np.tile(np.asarray(documents, dtype=np.int32), epochs)
    rng.shuffle(out)
    return out


def sample_index(
    lengths: np.ndarray,
    documents: np.ndarray,
    seq_length: int,
    tokens_total: int,
    drop_last: bool = True,
    extra: int = 1,
) -> np.ndarray:
    """``int64 (samples + 1, 2)``: where each sample starts, as (position in ``documents``,
    token offset in that document); the last row is where the last sample ends.

    ``lengths``: tokens of every sequence of the corpus; ``documents``: the document index;
    ``tokens_total``: tokens of the documents together. Sample ``k`` starts at token
    ``k * seq_length`` of the documents laid end to end; its row names the document holding
    its last token (``extra`` past the start of the next sample) and the next sample's start
    in it, as Megatron's ``build_sample_idx`` (a C++ loop) records it.
    """
    if drop_last:
        count = (tokens_total - extra) // seq_length
    else:  # Megatron computes this count in float32: kept, for the same count
        count = int(math.ceil(np.float32(tokens_total - extra) / np.float32(seq_length)))
    doc_lengths = np.asarray(lengths)[documents].astype(np.int64)
    ends = np.cumsum(doc_lengths)
    starts = np.arange(1, count + 1, dtype=np.int64) * seq_length
    last = len(documents) - 1
    at = np.searchsorted(ends, starts + extra, side="left")
    past = at > last  # a short final sample (drop_last=False): it ends with the documents
    at = np.minimum(at, last)
    offsets = starts - (ends[at] - doc_lengths[at])
    if past.any():
        offsets[past] = doc_lengths[last] - extra
    out = np.zeros((count + 1, 2), dtype=np.int64)
    out[1:, 0] = at
    out[1:, 1] = offsets
    return out


def shuffle_index(first: int, total: int, rng: np.random.RandomState) -> np.ndarray:
    """A permutation of ``[0, first)`` then one of ``[first, total)`` (int64)."""
    dtype = np.uint32 if total < np.iinfo(np.uint32).max - 1 else np.int64
    head = np.arange(first, dtype=dtype)
    rng.shuffle(head)  # on the same dtype as Megatron: the same draws
    if first == total:
        return head.astype(np.int64)
    tail = np.arange(first, total, dtype=dtype)
    rng.shuffle(tail)
    return np.concatenate([head, tail]).astype(np.int64)


@dataclasses.dataclass(frozen=True)
class GPTOrder:
    """The three indices of one split of one corpus (see the module docstring).

    ``document_index``: int32 sequence ids; ``sample_index``: int64 ``(samples + 1, 2)``;
    ``shuffle_index``: int64, sample ``i`` of the split is row ``shuffle_index[i]``;
    ``epochs``: how many times the split's documents are repeated.
    """

    document_index: np.ndarray
    sample_index: np.ndarray
    shuffle_index: np.ndarray
    epochs: int

    def __len__(self) -> int:
        return len(self.sample_index) - 1


def gpt_order(
    lengths: np.ndarray,
    begin: int,
    end: int,
    num_samples: int | None,
    seq_length: int,
    seed: int,
    *,
    extra: int = 1,
    drop_last: bool = True,
) -> GPTOrder:
    """Megatron's indices for the sequences ``[begin, end)`` of a corpus (``GPTDataset``'s
    ``_build_document_sample_shuffle_indices`` without its cache), ``lengths`` being the
    tokens of every sequence of the corpus. At least ``num_samples`` samples (one epoch's
    when None)."""
    if seq_length < 2:
        raise ConfigError(f"seq_length must be >= 2, got {seq_length}")
    lengths = np.asarray(lengths)
    tokens_per_epoch = int(lengths[begin:end].sum(dtype=np.int64))
    epochs = num_epochs(tokens_per_epoch, num_samples, seq_length, extra)
    separate = False
    before_final = 0
    if epochs > 1:
        assert num_samples is not None
        before_final = ((epochs - 1) * tokens_per_epoch - extra) // seq_length
        per_epoch = (tokens_per_epoch - extra) // seq_length
        separate = num_samples - before_final < int(_SEPARATE_FINAL_EPOCH_BELOW * per_epoch)
    rng = np.random.RandomState(seed)
    documents = document_index(np.arange(begin, end, dtype=np.int32), epochs, rng, separate)
    samples = sample_index(
        lengths, documents, seq_length, epochs * tokens_per_epoch, drop_last, extra
    )
    count = len(samples) - 1
    shuffle = shuffle_index(before_final if separate else count, count, rng)
    return GPTOrder(documents, samples, shuffle, epochs)


def blend_sizes(weights: list[float], size: int, surplus: float = 0.0) -> list[int]:
    """Samples each dataset of a blend of ``size`` gives (with a ``surplus`` share more)."""
    return [int(math.ceil(math.ceil(size * w) * (1 + surplus))) for w in weights]


def blending_indices(weights: list[float], size: int) -> tuple[np.ndarray, np.ndarray]:
    """``(dataset_index int16, dataset_sample_index int64)`` of a blend of ``size`` samples:
    sample ``s`` goes to the dataset whose share lags most behind its weight,
    ``argmax(w[d] * max(s, 1) - taken[d])`` (the first on ties), as Megatron's
    ``build_blending_indices`` decides it.

    Each choice depends on all the choices before it through float64 comparisons (ties
    included), so it is one loop over the samples, about 1 us a sample; the rank of each
    sample within its dataset is then vectorized.
    """
    weights = [float(x) for x in weights]
    counts = [0.0] * len(weights)
    chosen = np.empty(size, dtype=np.int16)
    others = range(1, len(weights))
    w0 = weights[0]
    for s in range(size):
        x = float(s) if s > 1 else 1.0
        best, error = 0, w0 * x - counts[0]
        for d in others:
            e = weights[d] * x - counts[d]
            if e > error:
                best, error = d, e
        chosen[s] = best
        counts[best] += 1.0
    return chosen, _rank_within(chosen, len(weights))


def _rank_within(labels: np.ndarray, n: int) -> np.ndarray:
    """For each position, how many earlier positions have the same label."""
    out = np.empty(len(labels), dtype=np.int64)
    for d in range(n):
        where = np.flatnonzero(labels == d)
        out[where] = np.arange(len(where), dtype=np.int64)
    return out
