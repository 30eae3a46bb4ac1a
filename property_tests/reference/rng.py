"""Counter-based randomness, scalar, re-implemented from docs/design/rng.md.

Nothing here imports fpipe: ``mix``, ``fold_in``, ``key``, ``name_id``, ``uniform`` and the
keyed Feistel permutation are written from the constants and rules the design note states, one
Python int at a time. ``tests`` of the reference (property_tests/test_reference_plan.py) check
them against fpipe.core.rng, which is how a change of either side shows.
"""

from __future__ import annotations

import functools
import hashlib

M64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15
SEED_TAG = 0x5EEDF01D00000001
NEGATIVE_TAG = 0x5EEDF01D000000FF
ROUNDS = 6
ROUND_TAG = 0xFE15


def mix(z: int) -> int:
    """SplitMix64's finalizer on 64 bits."""
    z &= M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def fold_in(k: int, *data: int) -> int:
    """``k = mix(k ^ mix(x ^ GAMMA))`` for each ``x`` in turn (read as 64-bit words)."""
    for x in data:
        k = mix(k ^ mix((x & M64) ^ GAMMA))
    return k


def key(seed: int) -> int:
    """The root key of a seed: its 64-bit words (at least two, low first; a negative seed is
    its complement then a sign word) folded into ``mix(SEED_TAG)``."""
    n = seed if seed >= 0 else ~seed
    words = []
    while n or len(words) < 2:
        words.append(n & M64)
        n >>= 64
    if seed < 0:
        words.append(NEGATIVE_TAG)
    return fold_in(mix(SEED_TAG), *words)


@functools.cache
def name_id(name: str) -> int:
    """63 bits of the 8-byte BLAKE2b digest of a name (little-endian, shifted right once)."""
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def step_key(root: int, name: str) -> int:
    """A step's key: its plan's root folded with its name."""
    return fold_in(root, name_id(name))


def input_root(root: int, name: str, i: int) -> int:
    """The root of input ``i`` of the multi-input step ``name``."""
    return fold_in(step_key(root, name), name_id("inputs"), i)


def uniform(k: int, *data: int) -> float:
    """The top 53 bits of ``fold_in(k, *data)`` as a float in [0, 1)."""
    return (fold_in(k, *data) >> 11) * (1.0 / (1 << 53))


@functools.lru_cache(maxsize=512)
def _round_keys(k: int) -> tuple[int, ...]:
    return tuple(fold_in(k, ROUND_TAG, r) for r in range(ROUNDS))


def permute(k: int, n: int, i: int) -> int:
    """``pi(i)`` of the keyed permutation of ``[0, n)``: a balanced Feistel network on the
    smallest even number of bits ``2h >= bits(n - 1)`` (at least 2), cycle-walked into
    ``[0, n)``."""
    assert 0 <= i < n
    if n == 1:
        return 0
    bits = max(2, (n - 1).bit_length())
    bits += bits & 1
    h = bits // 2
    mask = (1 << h) - 1
    rks = _round_keys(k)
    x = i
    while True:
        left, right = x >> h, x & mask
        for rk in rks:
            left, right = right, left ^ (mix(right ^ rk) & mask)
        x = (left << h) | right
        if x < n:
            return x
