"""Megatron-LM's ``--step-batch-size-schedule`` read into a BatchSchedule: the same size at
every step as Megatron's rule, its number syntax, and what it refuses."""

from __future__ import annotations

import random

import pytest

from fpipe.core.errors import ConfigError
from fpipe.plan import BatchSchedule


def megatron_sizes(rows, steps):
    """Megatron's StepBatchsizeNumMicroBatchesCalculator: before each step, the size of the
    last threshold <= the samples consumed so far."""
    consumed, out = 0, []
    for _ in range(steps):
        size = [s for t, s in rows if t <= consumed][-1]
        out.append(size)
        consumed += size
    return out


def test_every_step_has_megatrons_size():
    r = random.Random(1)
    cases = [
        [(0, 8), (40, 16), (100, 32)],
        [(0, 4), (5, 8), (6, 16), (7, 2)],  # thresholds crossed within one step
        [(0, 8), (16, 8), (30, 4)],  # an equal size: one entry
        [(0, 3)],
    ]
    for _ in range(30):
        thresholds = sorted(r.sample(range(1, 400), r.randint(1, 5)))
        cases.append([(0, r.randint(1, 40))] + [(t, r.randint(1, 40)) for t in thresholds])
    for rows in cases:
        text = " ".join(f"{t}:{s}" for t, s in r.sample(rows, len(rows)))  # any order
        schedule = BatchSchedule.megatron(text)
        want = megatron_sizes(rows, 120)
        assert [schedule.size_at(i) for i in range(120)] == want, text
        assert all(a != b for a, b in zip(schedule.sizes, schedule.sizes[1:]))
    assert BatchSchedule.megatron("0:8 16:8 30:4").sizes == (8, 4)


def test_numbers_suffixes_separators_and_token_thresholds():
    s = BatchSchedule.megatron(" 0:16 1K:32,2.5K:64 ")
    assert (s.steps, s.sizes) == ((0, 63, 110), (16, 32, 64))
    # 2.4B: int(2.4 * 1e9), as Megatron parses it; M and T alike
    for text, value in [("2.4B", 2_400_000_000), ("3M", 3_000_000), ("1T", 10**12), ("7", 7)]:
        assert BatchSchedule.megatron(f"0:1 {text}:2").steps == (0, value)
    assert BatchSchedule.megatron("0:1K").sizes == (1000,)
    # with seq_length the thresholds are tokens: threshold // seq_length samples
    tokens = BatchSchedule.megatron("0:16 2.4B:320", seq_length=2048)
    samples = 2_400_000_000 // 2048
    assert tokens.size_at(samples // 16 - 1) == 16
    assert tokens.size_at(-(-samples // 16)) == 320
    # a token threshold that seq_length does not divide: whole samples, rounded down
    assert BatchSchedule.megatron("0:1 1000:2", seq_length=3).steps == (0, 333)


@pytest.mark.parametrize(
    "bad, match",
    [
        (16, r"is a string, got 16"),
        ("", r"first threshold must be 0"),
        ("8:8", r"'8:8': the first threshold must be 0"),
        ("0:8 5", r"entry '5': expected THRESHOLD:SIZE \(Megatron-LM's --step-batch-size"),
        ("0:8 x:3", r"entry 'x:3': 'x' is not a number \(an optional K, M, B or T suffix\)"),
        ("0:8 4:x", r"entry '4:x': 'x' is not a number"),
        ("0:16:2", r"entry '0:16:2': '16:2' is not a number"),
        ("0:8 -4:3", r"entry '-4:3': '-4' must be >= 0"),
        ("0:8 nan:3", r"'nan' must be >= 0"),
        ("0:8 inf:3", r"'inf' must be >= 0"),
        ("0:8 10:4 10:2", r"thresholds must increase"),
        ("0:8 10:0", r"sizes must be >= 1"),
    ],
)
def test_bad_schedules_are_refused_naming_the_entry(bad, match):
    with pytest.raises(ConfigError, match=match):
        BatchSchedule.megatron(bad)
