"""Counter-based randomness: every decision is a pure function of a key and *where* it is made.

A key is a 64-bit unsigned integer. :func:`key` derives one from a seed; :func:`fold_in` mixes
integers (stage id, epoch, block, position...) into a key by hashing, never by arithmetic, so
``(seed 42, epoch 1)`` and ``(seed 43, epoch 0)`` are unrelated. No generator is ever advanced
from one decision to the next, and no global RNG is read.

The mixer is SplitMix64's finalizer (a bijective 64-bit avalanche function); both a scalar
(Python int) and a vectorized (numpy uint64) form are provided and agree bit for bit.

Example:
    >>> k = fold_in(key(1234), 7, 0)
    >>> permute_index(k, 10, 3) == permute_index(k, 10, 3)
    True
    >>> sorted(permutation(k, 5).tolist())
    [0, 1, 2, 3, 4]
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import itertools
from collections.abc import Callable, Sequence
from typing import Any, NewType

import numpy as np

__all__ = [
    "Key",
    "LazyGenerator",
    "UNIFORM_BITS",
    "choice",
    "fold_in",
    "fold_in_array",
    "generator",
    "inverse_permutation",
    "key",
    "name_id",
    "permutation",
    "permute_index",
    "randint",
    "split",
    "uniform",
    "uniform_array",
    "uniform_of_hashes",
]

#: A 64-bit unsigned key, only ever made by :func:`key` or :func:`fold_in`. At run time it is a
#: plain int; the type checker keeps a seed (or any other int) from passing where a key is wanted.
Key = NewType("Key", int)

_M64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_SEED_TAG = 0x5EED_F01D_0000_0001
_NEGATIVE_TAG = 0x5EED_F01D_0000_00FF
_FEISTEL_ROUNDS = 6


def _mix(z: int) -> int:
    """SplitMix64 finalizer on a Python int (bijective on 64 bits)."""
    z &= _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def _mix_np(z: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer on a uint64 array (wrapping multiplication)."""
    z = z ^ (z >> np.uint64(30))
    z = z * np.uint64(0xBF58476D1CE4E5B9)
    z = z ^ (z >> np.uint64(27))
    z = z * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def key(seed: int) -> Key:
    """Derive a root key from an integer seed, with no truncation: distinct seeds below 2**128
    in magnitude give distinct key derivations, and so do distinct seeds of one sign. A negative
    seed ``s`` is read as ``~s`` followed by a sign word, so it derives as a positive seed above
    2**128 whose top 64-bit word equals that sign word would (seeds that large are not used in
    practice; docs/design/rng.md)."""
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    seed = int(seed)
    # Non-negative seeds are read in 64-bit words (at least two); a negative seed is read as
    # its complement followed by a sign word, so -1 and 2**64 - 1 do not meet.
    n = seed if seed >= 0 else ~seed
    words: list[int] = []
    while n or len(words) < 2:
        words.append(n & _M64)
        n >>= 64
    if seed < 0:
        words.append(_NEGATIVE_TAG)
    k = _mix(_SEED_TAG)
    for w in words:
        k = _mix(k ^ _mix(w ^ _GAMMA))
    return Key(k)


def fold_in(k: Key, *data: int) -> Key:
    """Return a new key mixing the integers ``data`` into ``k``, in order.

    ``fold_in(k, a, b) == fold_in(fold_in(k, a), b)``; order matters and every value is
    hashed, so no two different positions collide by arithmetic.
    """
    h: int = k
    for x in data:
        h = _mix(h ^ _mix((int(x) & _M64) ^ _GAMMA))
    return Key(h)


def fold_in_array(k: Key | np.ndarray, *data: np.ndarray | int) -> np.ndarray:
    """Vectorized :func:`fold_in`: one key per element of the broadcast ``data`` arrays.

    ``k`` may itself be a ``uint64`` array of keys (broadcast with ``data``), so
    ``fold_in_array(fold_in_array(k, a), b) == fold_in_array(k, a, b)``.
    """
    arrays = [np.asarray(x).astype(np.int64, copy=False).view(np.uint64) for x in data]
    keys: np.ndarray | np.uint64
    if isinstance(k, np.ndarray):
        keys = k.astype(np.uint64, copy=False)
    else:
        keys = np.uint64(int(k) & _M64)
    shape = np.broadcast_shapes(np.shape(keys), *(a.shape for a in arrays))
    out = np.broadcast_to(keys, shape)
    with np.errstate(over="ignore"):
        for a in arrays:
            if a.ndim == 0:  # a scalar: hash it once
                out = _mix_np(out ^ np.uint64(_mix((int(a) & _M64) ^ _GAMMA)))
            else:
                out = _mix_np(out ^ _mix_np(a ^ np.uint64(_GAMMA)))
    return out if arrays else np.array(out)  # never the read-only broadcast view


def split(k: Key, n: int = 2) -> tuple[Key, ...]:
    """Split a key into ``n`` independent keys."""
    return tuple(fold_in(k, 0x5B117, i) for i in range(n))


def name_id(name: str) -> int:
    """A stable 63-bit integer for a name, for folding names (stage paths) into keys."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little") >> 1


#: A uniform is the top this many bits of a 64-bit hash over ``2**UNIFORM_BITS`` (each value
#: a float64 holds exactly).
UNIFORM_BITS = 53


def uniform(k: Key, *data: int) -> float:
    """A float in [0, 1) determined by ``k`` and the position ``data``."""
    return (fold_in(k, *data) >> (64 - UNIFORM_BITS)) * (1.0 / (1 << UNIFORM_BITS))


def uniform_array(k: Key | np.ndarray, *data: np.ndarray | int) -> np.ndarray:
    """Vectorized :func:`uniform`: a float64 in [0, 1) per element of the broadcast ``data``
    (``k`` may be an array of keys, as in :func:`fold_in_array`).

    Example:
        >>> uniform_array(7, np.arange(3)).tolist() == [uniform(7, i) for i in range(3)]
        True
    """
    return uniform_of_hashes(fold_in_array(k, *data))


def uniform_of_hashes(h: np.ndarray) -> np.ndarray:
    """The uniform in [0, 1) of each 64-bit hash of :func:`fold_in_array` (what
    :func:`uniform_array` gives for the data hashed): its top :data:`UNIFORM_BITS` bits."""
    return (h >> np.uint64(64 - UNIFORM_BITS)).astype(np.float64) * (1.0 / (1 << UNIFORM_BITS))


def randint(k: Key, high: int, *data: int) -> int:
    """An int in [0, high) determined by ``k`` and the position ``data`` (bias < 2**-40)."""
    if high <= 0:
        raise ValueError(f"high must be positive, got {high}")
    # 128-bit product of a 64-bit hash and `high`: Lemire's multiply-shift without rejection.
    return (fold_in(k, *data) * high) >> 64


def choice(k: Key, weights, *data: int) -> int:
    """Index i drawn with probability ``weights[i] / sum(weights)`` at position ``data``."""
    if isinstance(weights, (list, tuple)) and len(weights) <= 64:
        return _choice_small(k, weights, data)
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or len(w) == 0 or (w < 0).any() or not np.isfinite(w).all() or w.sum() <= 0:
        raise ValueError(f"weights must be a non-empty 1-D array of non-negative numbers: {w}")
    cdf = np.cumsum(w)
    i = int(np.searchsorted(cdf, uniform(k, *data) * cdf[-1], side="right"))
    # Guard the rounding edge, and never return an index of zero weight.
    i = min(i, len(w) - 1)
    while w[i] == 0:
        i -= 1
    return i


def _choice_small(k: Key, weights, data: tuple) -> int:
    # The same draw as the numpy path below (a sequential float64 cumsum, then the first cdf
    # value above u * total), in plain Python: ~10x faster for the few weights of a step.
    cdf = list(itertools.accumulate(map(float, weights)))
    if not cdf or not min(weights) >= 0 or not cdf[-1] > 0 or cdf[-1] == float("inf"):
        raise ValueError(
            f"weights must be non-negative finite numbers with a positive sum: {weights}"
        )
    i = min(bisect.bisect_right(cdf, uniform(k, *data) * cdf[-1]), len(cdf) - 1)
    while not weights[i]:
        i -= 1
    return i


class LazyGenerator:
    """Stands in for ``generator(key)`` and builds it only when first used.

    Most samples never draw a random number; building a Philox generator costs ~10 us, so the
    materialize tier hands out this proxy. Same key, same stream: nothing observable changes.
    """

    __slots__ = ("_data", "_gen", "_root")
    _gen: np.random.Generator  # set on first use

    def __init__(self, k: Key, *data: int):
        # The key is fold_in(k, *data), folded only if the generator is ever used.
        self._root, self._data = k, data

    @property
    def key(self) -> Key:
        """The generator's key: ``fold_in(k, *data)``."""
        return fold_in(self._root, *self._data)

    def __getattr__(self, name):
        if name == "_gen" or name.startswith("__"):
            raise AttributeError(name)
        try:
            gen = self._gen
        except AttributeError:
            gen = self._gen = generator(self.key)
        return getattr(gen, name)

    def __repr__(self) -> str:
        return f"LazyGenerator(key={self.key:#x})"


def generator(k: Key) -> np.random.Generator:
    """A numpy Generator (Philox) owned by this key, for per-sample augmentation.

    Build a new one from ``fold_in(...)`` for every sample; never keep one across decisions.
    """
    return np.random.Generator(np.random.Philox(key=int(k) & _M64))


# ---------------------------------------------------------------------------------------------
# Keyed permutation of [0, n): a balanced Feistel network on the smallest even-bit power of two
# >= n, with cycle walking. O(1) memory, random access, vectorized.


def _feistel_params(n: int) -> tuple[int, int]:
    bits = max(2, (n - 1).bit_length())
    bits += bits & 1
    half = bits // 2
    return half, (1 << half) - 1


@functools.lru_cache(maxsize=4096)
def _round_keys(k: Key) -> tuple[int, ...]:
    # A memo of a pure function: it changes no result, only how often the keys are hashed.
    return tuple(fold_in(k, 0xFE15, r) for r in range(_FEISTEL_ROUNDS))


def _rounds(
    left: Any, right: Any, rks: Sequence[Any], mask: Any, mix: Callable[[Any], Any], inverse: bool
) -> tuple[Any, Any]:
    """The Feistel rounds on the halves of a value: Python ints with :func:`_mix`, or uint64
    arrays with :func:`_mix_np` (the same rounds, so both forms agree bit for bit)."""
    if inverse:
        for rk in reversed(rks):
            left, right = right ^ (mix(left ^ rk) & mask), left
    else:
        for rk in rks:
            left, right = right, left ^ (mix(right ^ rk) & mask)
    return left, right


def _feistel_scalar(
    rks: tuple[int, ...], half: int, mask: int, n: int, x: int, inverse: bool
) -> int:
    while True:
        left, right = _rounds(x >> half, x & mask, rks, mask, _mix, inverse)
        x = (left << half) | right
        if x < n:
            return x


_SCALAR_MAX = 24  # below this many indices, Python ints beat numpy's per-call overhead


def _feistel_np(
    x: np.ndarray, rks: list, h: np.uint64, m: np.uint64, inverse: bool = False
) -> np.ndarray:
    """One Feistel pass over a uint64 array (``rks`` in forward order, as in the scalar form)."""
    with np.errstate(over="ignore"):
        left, right = _rounds(x >> h, x & m, rks, m, _mix_np, inverse)
        return (left << h) | right


def _cycle_walk(k: Key, n: int, x: np.ndarray, inverse: bool) -> np.ndarray:
    """``pi(x)`` (``pi^-1(x)`` when ``inverse``) for int64 indices ``x`` in [0, n): a Feistel
    pass, then the values that land >= n walk the cycle again (expected < 4 passes, since
    4^k < 4n). The one walk :func:`permutation` and :func:`inverse_permutation` share."""
    if n == 1:
        return np.zeros_like(x)
    half, mask = _feistel_params(n)
    if x.size <= _SCALAR_MAX:
        rk = _round_keys(k)
        walked = [
            _feistel_scalar(rk, half, mask, n, int(i), inverse) for i in x.reshape(-1).tolist()
        ]
        return np.array(walked, dtype=np.int64).reshape(x.shape)
    rks = [np.uint64(rk) for rk in _round_keys(k)]
    m, h, nn = np.uint64(mask), np.uint64(half), np.uint64(n)
    flat = x.reshape(-1).astype(np.uint64)
    out = np.empty_like(flat)
    pending = np.arange(flat.size)
    cur = flat
    while pending.size:
        cur = _feistel_np(cur, rks, h, m, inverse)
        ok = cur < nn
        out[pending[ok]] = cur[ok]
        pending, cur = pending[~ok], cur[~ok]
    return out.astype(np.int64).reshape(x.shape)


def _permutation_by_table(k: Key, n: int, x: np.ndarray) -> np.ndarray:
    """:func:`_cycle_walk` for a dense request: one Feistel pass over the whole domain (< 4n
    values), then the cycles walked by table lookup. Same permutation, far fewer numpy calls."""
    half, mask = _feistel_params(n)
    rks = [np.uint64(rk) for rk in _round_keys(k)]
    domain = np.arange(1 << (2 * half), dtype=np.uint64)
    table = _feistel_np(domain, rks, np.uint64(half), np.uint64(mask))
    out = table[x.reshape(-1)]
    nn = np.uint64(n)
    walk = out >= nn
    while walk.any():
        out[walk] = table[out[walk]]
        walk = out >= nn
    return out.astype(np.int64).reshape(x.shape)


def permutation(k: Key, n: int, index: np.ndarray | None = None) -> np.ndarray:
    """``pi(index)`` for the keyed permutation ``pi`` of [0, n) (all of it when index is None).

    Returns int64. The permutation is a bijection for every n >= 1 and depends only on (k, n).
    """
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    if index is None:
        index = np.arange(n, dtype=np.int64)
    x = np.asarray(index, dtype=np.int64)
    if x.size and (x.min() < 0 or x.max() >= n):
        raise IndexError(f"index out of range for a permutation of {n}")
    if n > 1 and x.size > _SCALAR_MAX and x.size * 4 >= 1 << (2 * _feistel_params(n)[0]):
        return _permutation_by_table(k, n, x)
    return _cycle_walk(k, n, x, inverse=False)


def inverse_permutation(k: Key, n: int, index: np.ndarray | int) -> np.ndarray:
    """``pi^-1(index)`` for the permutation of :func:`permutation` (random access too)."""
    return _cycle_walk(k, n, np.asarray(index, dtype=np.int64), inverse=True)


def permute_index(k: Key, n: int, i: int) -> int:
    """Scalar form of :func:`permutation`: where position ``i`` of [0, n) goes (pure Python,
    no numpy call: the fast path for one-off lookups)."""
    if not 0 <= i < n:
        raise IndexError(f"index {i} out of range for a permutation of {n}")
    if n == 1:
        return 0
    half, mask = _feistel_params(n)
    return _feistel_scalar(_round_keys(k), half, mask, n, int(i), False)
