"""A batch size that changes over the run: a step -> size table, and Megatron's ramp-up.

:class:`BatchSchedule` says how many refs step ``s`` takes: ``sizes[j]`` from step ``steps[j]``
on. :func:`fpipe.plan.distribute` and :func:`fpipe.plan.batch` take one in place of a fixed
size: each global batch is the next ``size_at(step)`` refs of the global order, so every ref
is used once whatever the sizes, and the state (a step count and the refs taken) restores on
any world size that divides every size.

Megatron-LM's ``--rampup-batch-size START INCR SAMPLES`` is :meth:`BatchSchedule.rampup`: the
global batch grows from ``START`` by ``INCR`` every ``SAMPLES / ((final - START) / INCR)``
consumed samples, and is the final size once ``SAMPLES`` samples are consumed. The table it
gives is Megatron's step for step (``update_num_microbatches(consumed_samples)`` before each
step).

Megatron-LM core 0.18 replaced that flag with ``--step-batch-size-schedule "0:16 2.4B:320 ..."``
(the global batch size from each threshold of consumed samples on): :meth:`BatchSchedule.megatron`
reads that string into the same step table.

Example:
    >>> s = BatchSchedule.rampup(32, 32, 10_000, final=256)
    >>> s.size_at(0), s.size_at(44), s.size_at(45), s.sizes[-1]
    (32, 32, 64, 256)
    >>> BatchSchedule.of({0: 8, 10: 16}).refs_before(12)
    112
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from typing import Any

import msgspec

from fpipe.core.errors import ConfigError

__all__ = ["BatchSchedule"]


class BatchSchedule(msgspec.Struct, frozen=True, kw_only=True):
    """Batch size by step: ``sizes[j]`` refs per step from step ``steps[j]`` on.

    ``steps`` start at 0 and increase; consecutive sizes differ (equal ones are merged by
    :meth:`of`). Global sizes when given to :func:`~fpipe.plan.distribute`; per-rank sizes
    (:meth:`per_rank`) when given to :func:`~fpipe.plan.batch`.
    """

    steps: tuple[int, ...]
    sizes: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.steps or self.steps[0] != 0 or len(self.steps) != len(self.sizes):
            raise ConfigError(
                f"a batch size schedule gives one size per step, from step 0: steps "
                f"{self.steps}, sizes {self.sizes}"
            )
        if any(b <= a for a, b in zip(self.steps, self.steps[1:])):
            raise ConfigError(f"batch size schedule steps must increase: {self.steps}")
        bad = [(t, s) for t, s in zip(self.steps, self.sizes) if not isinstance(s, int) or s < 1]
        if bad:
            raise ConfigError(f"batch sizes must be integers >= 1; step {bad[0][0]}: {bad[0][1]!r}")

    @classmethod
    def of(cls, table: Any) -> BatchSchedule:
        """From ``{step: size}``, ``[(step, size), ...]`` or a BatchSchedule (returned as is)."""
        if isinstance(table, BatchSchedule):
            return table
        pairs = table.items() if isinstance(table, Mapping) else table
        try:
            rows = sorted((int(t), s) for t, s in pairs)
        except (TypeError, ValueError):
            raise ConfigError(
                f"a global batch size schedule is {{step: size}} or [(step, size), ...], got "
                f"{table!r}"
            ) from None
        steps: list[int] = []
        sizes: list[int] = []
        for t, s in rows:
            if not isinstance(s, int) or isinstance(s, bool):
                raise ConfigError(f"batch size at step {t} must be an integer, got {s!r}")
            if sizes and s == sizes[-1]:
                continue
            steps.append(t)
            sizes.append(s)
        return cls(steps=tuple(steps), sizes=tuple(sizes))

    @classmethod
    def rampup(cls, start: int, increment: int, samples: int, *, final: int) -> BatchSchedule:
        """Megatron-LM's ``--rampup-batch-size start increment samples`` up to ``final``.

        Before each step, with ``c`` samples consumed, the size is ``final`` if ``c >
        samples``, else ``start + int(c / (samples / n)) * increment`` where ``n = (final -
        start) / increment`` increments (Megatron's ``RampupBatchsizeNumMicroBatches``).
        """
        for name, v in (("start", start), ("increment", increment), ("final", final)):
            if not isinstance(v, int) or v < 1:
                raise ConfigError(f"rampup_batch_size: {name} must be an integer >= 1, got {v!r}")
        if not isinstance(samples, int) or samples < 0:
            raise ConfigError(f"rampup_batch_size: samples must be an integer >= 0: {samples!r}")
        diff = final - start
        if diff < 0 or diff % increment:
            raise ConfigError(
                f"rampup_batch_size: the global batch size {final} must be the start {start} "
                f"plus a whole number of increments of {increment}"
            )
        if diff == 0 or samples == 0:  # nothing to ramp
            return cls(steps=(0,), sizes=(final,))
        per = samples / (diff // increment)  # samples per increment, as Megatron computes it

        def size(c: int) -> int:
            return final if c > samples else start + int(c / per) * increment

        steps, sizes, step, c = [], [], 0, 0
        while True:
            s = size(c)
            steps.append(step)
            sizes.append(s)
            if s == final:
                return cls(steps=tuple(steps), sizes=tuple(sizes))
            # Steps of size s: the first k with size(c + k * s) != s, found from an estimate.
            k = max(1, math.ceil(((c // per + 1) * per - c) / s) - 1)
            while k > 1 and size(c + (k - 1) * s) != s:
                k -= 1
            while size(c + k * s) == s:
                k += 1
            step, c = step + k, c + k * s

    @classmethod
    def megatron(cls, text: str, *, seq_length: int | None = None) -> BatchSchedule:
        """Megatron-LM's ``--step-batch-size-schedule`` (core 0.18 and later): ``"THRESHOLD:SIZE
        THRESHOLD:SIZE ..."`` (spaces or commas between pairs; a threshold or size may end in
        K, M, B or T for 1e3 .. 1e12). Before each step, with ``c`` samples consumed, the
        global batch size is the ``SIZE`` of the last threshold ``<= c``, as Megatron's
        ``StepBatchsizeNumMicroBatchesCalculator`` computes it. ``seq_length``: the thresholds
        are tokens, converted to samples by ``threshold // seq_length`` (Megatron's
        ``--seq-length`` with token thresholds).

        Example:
            >>> s = BatchSchedule.megatron("0:16 1K:32, 2.5K:64")
            >>> s.steps, s.sizes
            ((0, 63, 110), (16, 32, 64))
        """
        if not isinstance(text, str):
            raise ConfigError(f"a step batch size schedule is a string, got {text!r}")
        rows: list[tuple[int, int]] = []
        for entry in text.strip().replace(",", " ").split():
            threshold, sep, size_text = entry.partition(":")
            if not sep:
                raise ConfigError(
                    f"step batch size schedule entry {entry!r}: expected THRESHOLD:SIZE "
                    "(Megatron-LM's --step-batch-size-schedule, e.g. '0:16 2.4B:320')"
                )
            t, s = _megatron_number(threshold, entry), _megatron_number(size_text, entry)
            if seq_length is not None:
                t //= seq_length
            rows.append((t, s))
        rows.sort(key=lambda r: r[0])
        if not rows or rows[0][0] != 0:
            raise ConfigError(
                f"step batch size schedule {text!r}: the first threshold must be 0 (as in Megatron)"
            )
        if any(b[0] <= a[0] for a, b in zip(rows, rows[1:])):
            raise ConfigError(f"step batch size schedule {text!r}: thresholds must increase")
        if any(s < 1 for _, s in rows):
            raise ConfigError(f"step batch size schedule {text!r}: sizes must be >= 1")
        steps: list[int] = []
        sizes: list[int] = []
        step = consumed = 0
        for j, (_, size) in enumerate(rows):
            if sizes and size == sizes[-1]:
                pass
            else:
                steps.append(step)
                sizes.append(size)
            if j + 1 == len(rows):
                break
            # steps of this size until the consumed samples reach the next threshold
            k = max(0, -(-(rows[j + 1][0] - consumed) // size))
            step, consumed = step + k, consumed + k * size
        # thresholds crossed within one step leave steps with no samples: keep the last
        keep: dict[int, int] = {}
        for t, s in zip(steps, sizes):
            keep[t] = s
        return cls.of(keep)

    def size_at(self, step: int) -> int:
        """The batch size of step ``step``."""
        return self.sizes[bisect.bisect_right(self.steps, step) - 1]

    def steps_left(self, step: int) -> int | None:
        """Steps from ``step`` on that keep its batch size (None: every later step does)."""
        j = bisect.bisect_right(self.steps, step)
        return self.steps[j] - step if j < len(self.steps) else None

    def refs_before(self, step: int) -> int:
        """Refs that the steps before ``step`` take (all full)."""
        total, j = 0, bisect.bisect_right(self.steps, step) - 1
        for i in range(j):
            total += (self.steps[i + 1] - self.steps[i]) * self.sizes[i]
        return total + (step - self.steps[j]) * self.sizes[j]

    def per_rank(self, world_size: int) -> BatchSchedule:
        """The per-rank sizes on ``world_size`` ranks; a ConfigError names the first step whose
        size ``world_size`` does not divide."""
        for t, s in zip(self.steps, self.sizes):
            if s % world_size:
                raise ConfigError(
                    f"global batch size {s} (from step {t} of the schedule) is not a multiple of "
                    f"the world size {world_size}: every size of the schedule must divide by "
                    "every world size the run may use"
                )
        return BatchSchedule(steps=self.steps, sizes=tuple(s // world_size for s in self.sizes))


def _megatron_number(text: str, entry: str) -> int:
    """A number of ``--step-batch-size-schedule`` (``2.4B``: ``int(float("2.4") * 1e9)``, as
    Megatron parses it)."""
    value = text.strip().upper()
    mult = {"T": 10**12, "B": 10**9, "M": 10**6, "K": 10**3}.get(value[-1:], 1)
    if mult != 1:
        value = value[:-1]
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(
            f"step batch size schedule entry {entry!r}: {text!r} is not a number (an optional "
            "K, M, B or T suffix)"
        ) from None
    if not number >= 0 or number == float("inf"):
        raise ConfigError(f"step batch size schedule entry {entry!r}: {text!r} must be >= 0")
    return int(number * mult)
