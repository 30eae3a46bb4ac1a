"""Online blend weight changes as data: a change (:class:`MixChange`), a run's history of them
(:class:`MixHistory`), reading weights a user gives (:func:`resolve_weights`) and the check that
every rank asks for the same change (:func:`check_ranks_agree`).

The history is plain data (:class:`MixHistory`, saved beside a checkpoint as JSON): the
dataset names and every change in order. The state keeps only its digest, so the history is
what a seek from step 0 needs when weights were changed online.

Example:
    >>> h = MixHistory(datasets=("a", "b"), changes=(MixChange(10, (1.0, 3.0)),))
    >>> MixHistory.of(h.to_dict()) == h, len(h.digest())
    (True, 8)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec
import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.plan.online_mix import EMPTY_DIGEST, chain_digest, entry_weights, weights32

__all__ = ["MixChange", "MixHistory", "check_ranks_agree", "resolve_weights"]

HISTORY_FORMAT = "fpipe-mix-history"


class MixChange(msgspec.Struct, frozen=True, array_like=True):
    """Weights (one per dataset, float32 values) in force from global step ``step`` on."""

    step: int
    weights: tuple[float, ...]

    @property
    def raw(self) -> bytes:
        """The float32 bytes the blend stores."""
        return weights32(self.weights)


class MixHistory(msgspec.Struct, frozen=True):
    """Every online change of a run, in order: what :meth:`fpipe.loader.Loader.mix_history`
    returns as a dict (``to_dict``) and ``Loader.load_mix_history`` / ``seek`` read back."""

    datasets: tuple[str, ...]
    changes: tuple[MixChange, ...] = ()

    def digest(self, count: int | None = None) -> bytes:
        """The 8-byte digest of the first ``count`` changes (all by default), as the blend's
        state records it."""
        d = EMPTY_DIGEST
        for c in self.changes[:count]:
            d = chain_digest(d, c.step, c.raw)
        return d

    def to_dict(self) -> dict:
        """Plain data (JSON-ready): format, dataset names, changes with weights by name."""
        return {
            "format": HISTORY_FORMAT,
            "version": 1,
            "datasets": list(self.datasets),
            "changes": [
                {"step": c.step, "weights": dict(zip(self.datasets, _shortest(c.weights)))}
                for c in self.changes
            ],
            "digest": self.digest().hex(),
        }

    @classmethod
    def of(cls, data: Any, datasets: Sequence[str] | None = None) -> MixHistory:
        """A history from :meth:`to_dict`'s plain data (or a MixHistory); ``datasets``: the
        loader's names, which must be the history's. A ConfigError names what is wrong."""
        if isinstance(data, MixHistory):
            hist = data
        else:
            if not isinstance(data, Mapping) or data.get("format") != HISTORY_FORMAT:
                raise ConfigError(
                    "a mix history is the dict loader.mix_history() returns (format "
                    f"{HISTORY_FORMAT!r}), got {type(data).__name__}"
                )
            names = tuple(data.get("datasets") or ())
            changes = []
            for i, c in enumerate(data.get("changes") or ()):
                try:
                    step, w = int(c["step"]), c["weights"]
                except (KeyError, TypeError, ValueError):
                    raise ConfigError(f"mix history change {i} lacks 'step' or 'weights'") from None
                changes.append(MixChange(step, _floats(resolve_weights(w, names))))
            hist = cls(names, tuple(changes))
            if "digest" in data and data["digest"] != hist.digest().hex():
                raise ConfigError(
                    "mix history: its digest does not match its changes (the file was edited "
                    "or truncated)"
                )
        if datasets is not None and tuple(datasets) != hist.datasets:
            raise ConfigError(
                f"mix history is for datasets {list(hist.datasets)}, this loader blends "
                f"{list(datasets)}"
            )
        steps = [c.step for c in hist.changes]
        if any(s < 0 for s in steps) or any(b < a for a, b in zip(steps, steps[1:])):
            raise ConfigError(f"mix history: change steps must be >= 0 and in order: {steps}")
        return hist


def _shortest(weights: tuple[float, ...]) -> list[float]:
    # The shortest decimal that rounds to the same float32 (0.3, not 0.30000001192092896): the
    # history file reads as the user wrote it and parses back to the same bytes and digest.
    return [float(str(np.float32(w))) for w in weights]


def _floats(raw: bytes) -> tuple[float, ...]:
    return entry_weights(raw)


def resolve_weights(weights: Any, names: Sequence[str]) -> bytes:
    """Float32 weight bytes from ``{name or index: weight}`` (datasets left out weigh 0) or a
    sequence of one weight per dataset. Both forms are checked the same way: a ConfigError
    names an unknown or repeated dataset, a wrong count, or a weight that is not a finite
    number >= 0."""
    n = len(names)
    if isinstance(weights, Mapping):
        row: list[Any] = [0.0] * n
        index = {nm: i for i, nm in enumerate(names)}
        given: set[int] = set()
        for k, w in weights.items():
            i = index.get(k) if isinstance(k, str) else k
            if not isinstance(i, (int, np.integer)) or isinstance(i, bool) or not 0 <= i < n:
                raise ConfigError(f"set_weights: unknown dataset {k!r}; blended: {list(names)}")
            if int(i) in given:
                raise ConfigError(f"set_weights: dataset {names[i]!r} is given twice ({k!r})")
            given.add(int(i))
            row[int(i)] = w
    elif isinstance(weights, (str, bytes)) or not isinstance(weights, Iterable):
        raise ConfigError(
            f"set_weights takes {{dataset name: weight}} or one weight per dataset, got {weights!r}"
        )
    else:
        row = list(weights)
        if len(row) != n:
            raise ConfigError(f"set_weights: {len(row)} weights for {n} datasets {list(names)}")
    return weights32([_weight(w, name) for w, name in zip(row, names)])


def _weight(value: Any, name: str) -> float:
    """One dataset's weight as a float; a ConfigError naming the dataset unless it is a
    finite number >= 0."""
    try:
        w = float(value)
    except (TypeError, ValueError, OverflowError):
        w = math.nan
    if not math.isfinite(w) or w < 0:
        raise ConfigError(
            f"set_weights: the weight of {name!r} must be a finite number >= 0, got {value!r}"
        )
    return w


def check_ranks_agree(change: MixChange, group: Any = None) -> None:
    """With torch.distributed initialized on several ranks, refuse (ConsistencyError) a change
    that is not the same on every rank: a collective, so every rank must call set_weights."""
    from fpipe.loader.consistency import (
        ConsistencyError,
        _digest_words,
        _gather_rows,
        consistency_enabled,
    )

    if not consistency_enabled(None, group=group):
        return
    digest = chain_digest(EMPTY_DIGEST, change.step, change.raw)
    rows = _gather_rows(np.array([change.step, *_digest_words(digest)], dtype=np.int64), group)
    seen: dict[bytes, list[int]] = {}
    for r, row in enumerate(rows):
        seen.setdefault(row.tobytes(), []).append(r)
    if len(seen) > 1:
        groups = "; ".join(
            f"ranks {ranks} step {int(np.frombuffer(k, dtype=np.int64)[0])}"
            for k, ranks in seen.items()
        )
        raise ConsistencyError(
            f"set_weights: the ranks asked for different weight changes ({groups}); every rank "
            "must call set_weights with the same weights and step (compute them on one rank "
            "and broadcast them, or from values all-reduced over the ranks). Nothing changed."
        )
