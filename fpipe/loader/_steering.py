"""The loader's steering methods: set_weights, mix_history, load_mix_history and seek (see
:mod:`fpipe.loader.steering` for the plan-level functions they run)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from fpipe.core.errors import ConfigError
from fpipe.loader.blend_changes import _chain_blend, apply_change, blend_of, next_step, state_mix
from fpipe.loader.mix_history import MixChange, MixHistory, check_ranks_agree, resolve_weights
from fpipe.loader.seek import seek_state
from fpipe.loader.state import LoaderState, state_epoch
from fpipe.plan.blend import BlendConfig
from fpipe.plan.online_mix import EMPTY_DIGEST, entry_weights

if TYPE_CHECKING:
    from fpipe.loader.dataloader import Loader


class MixLog(msgspec.Struct, frozen=True):
    """A loader's online weight changes: ``changes`` follow ``base`` earlier ones it does not
    know (restored without their history); the state holds the first ones, the rest are
    scheduled for later steps."""

    base: int = 0
    changes: list = msgspec.field(default_factory=list)


__all__ = [
    "MixLog",
    "known_history",
    "load_mix_history",
    "mix_history",
    "pending_changes",
    "seek",
    "set_weights",
]


def _refuse_packing_buffer(loader: Loader, what: str) -> None:
    if getattr(loader.dataset, "packing_buffer_size", None):
        raise ConfigError(
            f"{what} needs batches the plan decides: with packing_buffer_size (the task "
            "encoder's packing hooks) a batch's packs are only known after reading its samples. "
            "Pack in the plan tier instead (plan_stages=[fpipe.plan.pack(...)], docs/packing.md)"
        )


def _count(loader: Loader, plan_state: Any = None) -> tuple[int, bytes]:
    """(changes, digest) that ``plan_state`` (default: the loader's) holds ((0, zeros) for a
    plan without a weighted blend)."""
    if not loader._mix.changes and not loader._mix.base and plan_state is not None:
        return 0, EMPTY_DIGEST  # nothing known to apply: no need to look
    if not any(isinstance(c, BlendConfig) and c.mode == "weighted" for _, c in loader.plan.parts):
        return 0, EMPTY_DIGEST
    if _chain_blend(loader.plan) is None:  # blends inside datasets blended whole
        return 0, EMPTY_DIGEST
    state = loader._state.plan if plan_state is None else plan_state
    mix = state_mix(loader.plan, state)
    return (0, EMPTY_DIGEST) if mix is None else (mix.changes, mix.digest)


def set_weights(loader: Loader, weights: Any, at_step: int | None) -> None:
    """:meth:`fpipe.loader.Loader.set_weights`."""
    _refuse_packing_buffer(loader, "set_weights")
    plan = loader.plan
    _, config = blend_of(plan)
    raw = resolve_weights(weights, config.datasets)
    # the step count of the state, not the next recipe planned under the weights in force: a
    # finite stream with no further step under those may have one under the new weights
    current = next_step(plan, loader._state.plan)
    if at_step is not None and (isinstance(at_step, bool) or not isinstance(at_step, int)):
        raise ConfigError(f"set_weights: at_step must be a global step number, got {at_step!r}")
    step = current if at_step is None else at_step
    if step < current:
        raise ConfigError(
            f"set_weights at step {step}: the loader is already at step {current}; restore a "
            "checkpoint from before it (or seek there) to change the weights of that step"
        )
    change = MixChange(step, entry_weights(raw))
    check_ranks_agree(change, getattr(loader.dataset.topology, "data_parallel_group", None))
    count, _ = _count(loader)
    log = loader._mix
    held = count - log.base  # changes of log.changes the state holds
    pending = log.changes[held:]
    earlier = [c for c in pending if c.step <= step]
    later = [c for c in pending if c.step > step]
    state = loader._state.plan
    now = step == current and not earlier
    if now:
        state = apply_change(plan, state, change)
    if not len(plan.next(state, 1)[1]):  # no step `current`, under the weights in force there
        also = ", also with these weights" if now else ""
        raise ConfigError(
            f"set_weights: the stream has ended at step {current}{also}; there is no later "
            "step to change"
        )
    loader._state = msgspec.structs.replace(loader._state, plan=state)
    loader._mix = MixLog(log.base, [*log.changes[:held], *earlier, change, *later])
    loader._generation += 1


def pending_changes(loader: Loader, start: Any = None) -> list[MixChange]:
    """The changes the plan state ``start`` (default: the loader's) does not hold yet, in
    order: those scheduled for later steps. A pool that restarts from a later state (worker
    recovery) does not apply again what that state holds."""
    count, _ = _count(loader, start)
    return list(loader._mix.changes[max(0, count - loader._mix.base) :])


def mix_history(loader: Loader) -> dict:
    """:meth:`fpipe.loader.Loader.mix_history`."""
    _, config = blend_of(loader.plan)
    count, digest = _count(loader)
    if loader._mix.base:
        raise ConfigError(
            f"this loader was restored from a state with {loader._mix.base} online weight "
            "change(s) it does not know: call loader.load_mix_history(history) with the history "
            "saved beside that checkpoint"
        )
    hist = MixHistory(config.datasets, tuple(loader._mix.changes[:count]))
    assert hist.digest() == digest  # the log follows the state (checked on every restore)
    return hist.to_dict()


def known_history(loader: Loader, log: MixLog) -> MixLog:
    """After a restore: the known changes that the restored state holds (checked by digest);
    an unknown prefix otherwise. Changes scheduled after them are dropped: the restored state
    decides the run from here."""
    count, digest = _count(loader)
    held = tuple(log.changes[:count])
    if not log.base and len(held) == count and MixHistory((), held).digest() == digest:
        return MixLog(0, list(held))
    return MixLog(count, [])


def _leading_history(loader: Loader, history: Any) -> MixHistory:
    """``history`` read and checked against the loader's state: its first changes must be
    those the state holds (by digest)."""
    _, config = blend_of(loader.plan)
    hist = MixHistory.of(history, config.datasets)
    count, digest = _count(loader)
    if len(hist.changes) < count or hist.digest(count) != digest:
        raise ConfigError(
            f"this mix history does not lead to the loader's state: the state holds {count} "
            f"change(s) with digest {digest.hex()}, the history's first {count} give "
            f"{hist.digest(count).hex()} (a history of another run, or one saved before this "
            "checkpoint)"
        )
    return hist


def load_mix_history(loader: Loader, history: Any) -> None:
    """:meth:`fpipe.loader.Loader.load_mix_history`."""
    loader._mix = MixLog(0, list(_leading_history(loader, history).changes))
    # changes due at the loader's next step go into its state now, as set_weights does: a
    # state_dict() taken before the next batch must hold them (it restores into the run)
    plan, state = loader.plan, loader._state.plan
    current = next_step(plan, state)
    count, _ = _count(loader)
    for change in loader._mix.changes[count:]:
        if change.step > current:
            break
        state = apply_change(plan, state, change)
    loader._state = msgspec.structs.replace(loader._state, plan=state)
    loader._generation += 1


def _seek_changes(loader: Loader, history: Any) -> tuple[MixChange, ...]:
    """The changes a seek replays: those the loader knows (its run's history, however it
    learnt it), or ``history`` where the loader knows none or ``history`` goes on from them.
    A history that disagrees with the known one, or a seek of a loader restored from changes
    it does not know without their history, is a ConfigError: a stream that silently left
    out the run's changes would not be the run's."""
    log = loader._mix
    if history is None:
        if log.base:
            raise ConfigError(
                f"seek: this loader was restored from a state with {log.base} online weight "
                "change(s) it does not know, and a seek replays the run from step 0: pass the "
                "history saved beside that checkpoint, loader.seek(step, mix_history=history)"
            )
        return tuple(log.changes)
    if log.base:  # the known part is the state's digest: the history must lead to it
        return _leading_history(loader, history).changes
    _, config = blend_of(loader.plan)
    given = MixHistory.of(history, config.datasets).changes
    known = tuple(log.changes)
    i = next((i for i, (a, b) in enumerate(zip(given, known)) if a != b), None)
    if i is not None:
        raise ConfigError(
            f"seek: this mix history differs from the one this loader follows at change {i} "
            f"(step {given[i].step}, weights {list(given[i].weights)}; the loader's: step "
            f"{known[i].step}, weights {list(known[i].weights)}). A loader replays one run's "
            "history: make a new loader (fpipe.get_loader(..., mix_history=history)) to seek "
            "in another run"
        )
    return given if len(given) > len(known) else known  # an earlier save is a prefix


def seek(loader: Loader, step: int, history: Any) -> None:
    """:meth:`fpipe.loader.Loader.seek`."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ConfigError(f"seek: the step must be an integer >= 0, got {step!r}")
    _refuse_packing_buffer(loader, "seek")
    changes = _seek_changes(loader, history)
    plan_state, batches, samples, epoch = seek_state(loader.plan, step, loader._state.skip, changes)
    epoch = state_epoch(loader.plan, plan_state, epoch)
    loader._state = LoaderState(plan_state, batches, samples, 0, epoch, skip=loader._state.skip)
    loader._mix = MixLog(0, list(changes))
    loader._generation += 1
