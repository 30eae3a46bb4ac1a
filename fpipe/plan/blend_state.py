"""A blend's records and the checks of them: :class:`BlendConfig` (built from the arguments of
:func:`~fpipe.plan.blend.blend` by :func:`blend_config`, which refuses bad ones), the states
:class:`BlendState` and :class:`UnitBlendState`, the weight digests a state carries and the
check a restore makes of them (:func:`restore_check`), and the online weight changes a state
records (:func:`online_mix`, :func:`with_online_change`). A blend with ``draw="quota"``
(:mod:`fpipe.plan.blend_quota`) derives its counters from the position and keeps
:class:`QuotaBlendState` instead: no counter, one weight digest, its changes' weights as
compact integer shares.

The blend itself, which reads and writes these records, is :mod:`fpipe.plan.blend`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar, Literal

import msgspec
import numpy as np

from fpipe.core.errors import ConfigError, SnapshotError, SnapshotMismatchError
from fpipe.core.records import Config, State
from fpipe.core.rng import Key, name_id
from fpipe.core.stage import View
from fpipe.plan._blend_units import COUNTER_BYTES
from fpipe.plan.blend_choice import WeightSchedule
from fpipe.plan.blend_quota import encode_shares, quantize
from fpipe.plan.online_mix import (
    MAX_QUOTA_CHANGES,
    OnlineMix,
    add_change,
    decode_mix,
    encode_mix,
    prune,
)

__all__ = [
    "BlendConfig",
    "BlendDraw",
    "BlendMode",
    "BlendState",
    "CHANGED_MIX_HINT",
    "MAX_QUOTA_CHANGES",
    "QuotaBlendState",
    "UnitBlendState",
    "blend_config",
    "online_mix",
    "restore_check",
    "weight_digests",
    "with_online_change",
]

#: How a blend chooses: by weight (a schedule), or epochized (exact counts per blend epoch).
BlendMode = Literal["weighted", "epochized"]
#: How a weighted blend draws: each position on its own (``"hash"``), or in blocks whose
#: counts are a formula of the position (``"quota"``, see :mod:`fpipe.plan.blend_quota`).
BlendDraw = Literal["hash", "quota"]

CHANGED_MIX_HINT = (
    "the datasets of a blend changed: a snapshot keeps one counter per dataset, so adding, "
    "removing or renaming a dataset cannot continue the same run. Resume with the same "
    "datasets, or start a new run from the new metadataset."
)


class BlendConfig(Config, frozen=True):
    """A blend of ``datasets`` (names, in order) with ``sizes`` refs per epoch each.

    ``mode``: ``"weighted"`` (``schedule`` gives the weights) or ``"epochized"`` (dataset ``d``
    gives ``counts[d]`` refs per blend epoch). ``num_epochs``: blend epochs before the stream
    ends (None: forever); a weighted blend's epoch is ``sum(sizes)`` positions.
    ``unit``: None (weights are shares of samples) or the index column whose values weights
    share (``"tokens"``; see :mod:`fpipe.plan._blend_units`).
    ``draw``: how a weighted blend draws (``"hash"`` or ``"quota"``).
    ``schedule``, ``unit`` and ``draw`` are declared compatible: a restore checks them itself,
    by dataset name (the state's weight digests cover them; a quota blend's state is of another
    type), and accepts a change of weights when ``allow_changed_weights`` is set.
    """

    compatible: ClassVar[frozenset[str]] = frozenset(
        {"schedule", "allow_changed_weights", "unit", "draw"}
    )
    mismatch_hint: ClassVar[str] = CHANGED_MIX_HINT

    datasets: tuple[str, ...]
    sizes: tuple[int, ...]
    mode: BlendMode = "weighted"
    schedule: WeightSchedule | None = None
    counts: tuple[int, ...] = ()
    num_epochs: int | None = None
    allow_changed_weights: bool = False
    unit: str | None = None
    draw: BlendDraw = "hash"


class BlendState(State, frozen=True, array_like=True):
    """``key``: the root key of the blend's plan; ``position``: next global position;
    ``taken[d]``: refs dataset ``d`` gave so far (its epoch is ``taken[d] // size``);
    ``weights``: 2-byte digest per dataset of its scheduled weights, checked on restore; after
    weights changed online, followed by the :class:`~fpipe.plan.online_mix.OnlineMix` record
    of the changes (see :func:`online_mix`)."""

    key: Key
    position: int
    taken: tuple[int, ...]
    weights: bytes = b""

    #: The online changes store float32 weights and only those positions ahead still use.
    compact_changes: ClassVar[bool] = False

    @staticmethod
    def digest_bytes(n: int) -> int:
        """Bytes of weight digests at the head of ``weights`` for ``n`` datasets."""
        return 2 * n


class QuotaBlendState(State, frozen=True, array_like=True):
    """The state of a blend with ``draw="quota"``: ``key`` and ``position`` as in
    :class:`BlendState`, no counter (each dataset's is a formula of the position, see
    :mod:`fpipe.plan.blend_quota`), and ``weights``: one 2-byte digest of the scheduled weights,
    then, after weights changed online, the :class:`~fpipe.plan.online_mix.OnlineMix` record
    of every change, its weights as compressed integer shares."""

    key: Key
    position: int
    #: always empty: laid out as :class:`BlendState` so that a snapshot of the other draw
    #: decodes and its restore is refused by name (``draw``), not as foreign bytes
    taken: tuple[int, ...] = ()
    weights: bytes = b""

    compact_changes: ClassVar[bool] = True

    @staticmethod
    def digest_bytes(n: int) -> int:
        return 2


class UnitBlendState(BlendState, frozen=True, array_like=True):
    """The state of a blend by units (``unit="tokens"``): :class:`BlendState` plus
    ``tokens``: for each dataset ``d``, the units it gave since the start of the
    constant-weight segment that holds ``position``, as 6-byte counters (fixed width)."""

    tokens: bytes = b""


def weight_digests(
    schedule: WeightSchedule | None, n: int, unit: str | None = None, draw: BlendDraw = "hash"
) -> bytes:
    """2 bytes per dataset: a digest of its column of ``schedule`` (and of ``unit``), which a
    state carries so that a restore sees changed weights (b"" for an epochized blend); 2 bytes
    for a quota blend: a digest of the whole schedule."""
    if schedule is None:
        return b""
    if draw == "quota":
        text = repr(("quota", schedule.linear, schedule.points, schedule.weights))
        return (name_id(text) & 0xFFFF).to_bytes(2, "little")
    out = bytearray()
    for d in range(n):
        col = (schedule.linear, schedule.points, tuple(row[d] for row in schedule.weights))
        text = repr(col) if unit is None else repr((*col, unit))
        out += (name_id(text) & 0xFFFF).to_bytes(2, "little")
    return bytes(out)


def blend_config(
    views: Sequence[View],
    *,
    weights: Sequence[float] | None,
    schedule: WeightSchedule | None,
    repetitions: Sequence[float] | None,
    counts: Sequence[int] | None,
    names: Sequence[str] | None,
    num_epochs: int | None,
    allow_changed_weights: bool,
    unit: str | None,
    draw: str = "hash",
) -> tuple[BlendConfig, int | None]:
    """The config of a blend of ``views`` from :func:`~fpipe.plan.blend.blend`'s arguments
    (see there), and its limit: the positions before the stream ends (None: forever). A
    :class:`~fpipe.core.errors.ConfigError` names what is wrong with them."""
    n = len(views)
    names = tuple(names) if names is not None else tuple(f"d{i}" for i in range(n))
    if n == 0 or len(names) != n or len(set(names)) != n:
        raise ConfigError(f"blend needs one unique name per view, got {names} for {n} views")
    sizes = tuple(v.size for v in views)
    for nm, size in zip(names, sizes):
        if size <= 0:
            raise ConfigError(f"blend: dataset {nm!r} has no samples")
    if sum(x is not None for x in (weights, schedule, repetitions)) != 1:
        raise ConfigError("blend: give exactly one of weights, schedule or repetitions")
    if num_epochs is not None and num_epochs < 0:
        raise ConfigError(f"num_epochs must be >= 0 or None, got {num_epochs}")
    given_counts, counts = counts, ()
    mode: BlendMode
    if given_counts is not None and repetitions is None:
        raise ConfigError("blend: counts apply to an epochized blend (repetitions)")
    if repetitions is not None:
        if len(repetitions) != n or any(not r > 0 for r in repetitions):
            raise ConfigError(f"blend: repetitions must be > 0, one per dataset: {repetitions}")
        counts = tuple(max(1, round(r * s)) for r, s in zip(repetitions, sizes))
        if given_counts is not None:
            if len(given_counts) != n or any(int(c) < 1 for c in given_counts):
                raise ConfigError(f"blend: counts must be >= 1, one per dataset: {given_counts}")
            counts = tuple(int(c) for c in given_counts)
        mode, epoch_len = "epochized", sum(counts)
    else:
        if schedule is None:
            assert weights is not None  # exactly one of the three is given (checked above)
            schedule = WeightSchedule.constant(weights)
        if len(schedule.weights[0]) != n:
            raise ConfigError(f"blend: {len(schedule.weights[0])} weights for {n} datasets")
        mode, epoch_len = "weighted", sum(sizes)
    if unit in ("", "samples"):
        unit = None  # the default: weights are shares of samples
    if unit is not None and mode != "weighted":
        raise ConfigError(
            f"blend: unit {unit!r} applies to a weighted blend; an epochized blend takes whole "
            "passes of samples"
        )
    if draw not in ("hash", "quota"):
        raise ConfigError(f"blend: draw must be 'hash' or 'quota', got {draw!r}")
    if draw == "quota":
        _check_quota(mode, schedule, unit, allow_changed_weights)
    config = BlendConfig(
        datasets=names,
        sizes=sizes,
        mode=mode,
        schedule=schedule,
        counts=counts,
        num_epochs=num_epochs,
        allow_changed_weights=allow_changed_weights,
        unit=unit,
        draw=draw,  # type: ignore[arg-type]  # checked above
    )
    limit = None if num_epochs is None else num_epochs * epoch_len
    return config, limit


def _check_quota(
    mode: BlendMode, schedule: WeightSchedule | None, unit: str | None, allow_changed: bool
) -> None:
    """A ConfigError for what a quota draw does not do."""
    if mode != "weighted" or schedule is None:
        raise ConfigError("blend: draw='quota' applies to a weighted blend (weights or schedule)")
    if unit is not None:
        raise ConfigError(
            f"blend: draw='quota' counts samples; a blend by {unit!r} chooses by its own counters"
        )
    if schedule.linear:
        raise ConfigError(
            "blend: draw='quota' needs constant weights or a schedule of steps, not a linear one"
        )
    if allow_changed:
        raise ConfigError(
            "blend: draw='quota' derives each dataset's count from the weights in force since "
            "the start, so it cannot resume under other configured weights "
            "(allow_changed_weights); resume with the same weights and change them with "
            "loader.set_weights"
        )


def restore_check(
    *,
    name: str,
    names: tuple[str, ...],
    n: int,
    mode: BlendMode,
    unit: str | None,
    digests: bytes,
    allow_changed_weights: bool,
    draw: BlendDraw = "hash",
) -> Callable[[BlendState], None]:
    """The check of a restored state of the blend ``name`` (datasets ``names``, ``n`` of them,
    whose weights have the digests ``digests``): a :class:`~fpipe.core.errors.SnapshotError` for
    an edited or corrupted state, a :class:`~fpipe.core.errors.SnapshotMismatchError` for one
    taken with other datasets, or with other weights unless ``allow_changed_weights``."""

    def check(state):
        if mode == "weighted" and (len(state.taken) == 0) != (draw == "quota"):
            other = "hash" if draw == "quota" else "quota"
            raise SnapshotMismatchError(
                f"blend {name!r}: field 'draw' differs: the snapshot was taken with "
                f"draw={other!r}, this blend draws with draw={draw!r}; the two keep different "
                "counters, so a run resumes only with the draw it started with"
            )
        if unit is not None and len(getattr(state, "tokens", b"")) not in (0, COUNTER_BYTES * n):
            raise SnapshotError(
                f"snapshot state of blend {name!r}: {len(state.tokens)} bytes of unit counters "
                f"for {n} datasets: the snapshot was edited or corrupted"
            )
        own = state.weights[: len(digests)]
        if len(state.weights) > len(digests):
            if mode != "weighted":
                raise SnapshotError(
                    f"snapshot state of blend {name!r}: online weights in an epochized blend: "
                    "the snapshot was edited or corrupted"
                )
            # a SnapshotError if malformed
            decode_mix(state.weights[len(digests) :], n, state.compact_changes)
        if own == digests or allow_changed_weights:
            return
        if len(own) != len(digests):
            raise SnapshotMismatchError(f"blend {name!r}: {CHANGED_MIX_HINT}")
        if state.compact_changes:  # one digest of all the weights
            raise SnapshotMismatchError(
                f"blend {name!r}: the weights differ from the snapshot's; a blend with "
                "draw='quota' derives each dataset's count from them, so it resumes only with "
                "the same weights (change them with loader.set_weights instead)"
            )
        changed = [
            nm for d, nm in enumerate(names) if own[2 * d : 2 * d + 2] != digests[2 * d : 2 * d + 2]
        ]
        raise SnapshotMismatchError(
            f"blend {name!r}: the weights of {changed} differ from the snapshot's (or the "
            "blend_unit that weighs them changed); resuming "
            "would change the mix mid-run. Pass allow_changed_weights=True to continue each "
            "dataset from its own position with the new weights from here on."
        )

    return check


def online_mix(state: BlendState | QuotaBlendState, n: int) -> OnlineMix | None:
    """The online weight changes a weighted blend's state of ``n`` datasets holds (None:
    never changed)."""
    extra = state.weights[state.digest_bytes(n) :]
    return decode_mix(extra, n, state.compact_changes) if extra else None


def with_online_change(
    state: BlendState | QuotaBlendState, n: int, *, position: int, step: int, weights: bytes
) -> BlendState | QuotaBlendState:
    """``state`` (a weighted blend of ``n`` datasets) with the weights ``weights`` (float32
    bytes, see :func:`fpipe.plan.online_mix.weights32`) in force from ``position`` (at or after
    the state's own position) on, recorded as a change at global step ``step``. A blend by
    units counts its units from ``position`` on (from zero, as at a schedule point). A quota
    blend keeps every change, its weights as integer shares (:mod:`fpipe.plan.blend_quota`)."""
    if position < state.position:
        raise ConfigError(
            f"online weights from blend position {position}, before the blend's {state.position}"
        )
    head = state.weights[: state.digest_bytes(n)]
    if state.compact_changes:
        shares = encode_shares(quantize(np.frombuffer(weights, dtype="<f4").astype(np.float64)))
        mix = add_change(
            online_mix(state, n),
            position=position,
            step=step,
            weights=weights,
            stored=shares,
            limit=MAX_QUOTA_CHANGES,
        )
        return msgspec.structs.replace(state, weights=head + encode_mix(mix))
    mix = add_change(online_mix(state, n), position=position, step=step, weights=weights)
    mix = prune(mix, state.position)
    new = msgspec.structs.replace(state, weights=head + encode_mix(mix))
    if isinstance(new, UnitBlendState) and position == state.position:
        # The change starts a segment at the state's own position (no lookahead drew past it:
        # a shuffle window used up to the step, or none at all), so the unit counters, which
        # count from the start of the segment holding the position, start again here. A change
        # further ahead is reached inside a block, where the blend starts them again itself.
        new = msgspec.structs.replace(new, tokens=bytes(COUNTER_BYTES * n))
    return new
