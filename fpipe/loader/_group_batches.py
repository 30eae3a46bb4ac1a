"""Grouped batching (Energon's ``batch_group_criterion``) over the ordered stream of encoded
samples, with a state made of sample references.

The criterion reads the *encoded* sample, so it cannot be decided in the plan tier. Each recipe
is a chunk of the plan's stream; workers read and encode its samples (any worker, any mode) and
the loader takes the results in plan order, so every sample reaches :class:`GroupBatcher`, in
the main process, in the same order whatever ``num_workers`` or the worker mode. Energon's rules
then apply as in its ``GroupBatchDataset``: ``criterion(sample) -> (group, batch_size)``; a
sample joins its group (groups are kept in the order first seen); a group that reaches its
batch size is collated (``batch``, then ``encode_batch``) and delivered; at the end of the
stream the partly filled groups are delivered in that order, or dropped (and counted) with
``drop_last``. With a fixed ``batch_size`` the criterion returns None as the size.

The loader state after a batch is ``(plan state at the start of the chunk holding the next
encoded sample, encoded samples of it already grouped, the groups)``: each group's waiting
samples by reference (:class:`~fpipe.loader.state.SampleRef`: recipe step, position, output,
dataset, index, epoch), and a group with none waiting by one sample that names it. A restore
materializes and encodes those samples again (each exactly as it was: the same rng and sample
index), computes their groups, and continues. See docs/design/grouping.md.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

import msgspec

from fpipe.core.errors import ConfigError, SnapshotError
from fpipe.core.records import Recipe, Refs
from fpipe.encode.hooks import SkipSample
from fpipe.loader.state import GroupRefs, GroupsState, LoaderState, SampleRef
from fpipe.materialize.materializer import naming_failures

__all__ = ["GroupBatcher", "check_group_loader"]


def check_group_loader(dataset: Any, worker_mode: str, num_workers: int) -> None:
    """Refuse, when the loader is made, what grouped batching does not run with."""
    if getattr(dataset, "group_batches", False) and worker_mode == "ray" and num_workers > 0:
        raise ConfigError(
            "grouped batching (batch_group_criterion) runs with worker_mode 'process' or "
            "'thread'; worker_mode='ray' is not supported for it"
        )


class _Group:
    """A group: its batch size, its waiting ``(ref, sample)`` pairs, the last ref it took."""

    __slots__ = ("batch_size", "last", "waiting")

    def __init__(self, batch_size: int):
        self.batch_size = batch_size
        self.waiting: list[tuple[SampleRef, Any]] = []
        self.last: SampleRef | None = None

    def refs(self) -> GroupRefs:
        if self.waiting:
            return GroupRefs(self.batch_size, tuple(r for r, _ in self.waiting))
        return GroupRefs(self.batch_size, (), self.last)


class GroupBatcher:
    """Turns the encoded samples of chunks into ``(batch, loader state)`` pairs.

    ``start`` is the loader state iteration begins from: its groups are materialized again and
    its ``packs_taken`` encoded samples of the first chunk are passed over (grouped before).
    """

    def __init__(self, dataset: Any, start: LoaderState):
        self.materializer = dataset.materializer
        self.encoder = self.materializer.task_encoder
        self.fixed: int | None = dataset.batch_size or None  # 0: each group its own size
        self.drop_last = dataset.drop_last
        self.groups: dict[Any, _Group] = {}
        self.key: int | None = None
        self.skipped = 0  # error-policy skips of chunks the state has moved past
        self.last_state: LoaderState | None = None
        self.resume(start)

    # --- restore -------------------------------------------------------------------------------

    def resume(self, start: LoaderState) -> None:
        """Continue from ``start``: the groups in memory when ``start`` is the last state this
        batcher made, else materialized again from its references."""
        self.before, self.skip, self.skipped = start.plan, start.packs_taken, 0
        if start is self.last_state:
            return
        self.groups, self.key = {}, None
        if start.groups is not None:
            self.key = start.groups.key
            self._restore(start.groups)

    def _restore(self, saved: GroupsState) -> None:
        wanted = [
            g.waiting or ((g.witness,) if g.witness is not None else ()) for g in saved.groups
        ]
        samples = self._materialize([r for refs in wanted for r in refs])
        for g, refs in zip(saved.groups, wanted):
            if not refs:
                raise SnapshotError("snapshot state.groups holds a group with no sample")
            keys = [self._criterion(samples[r], r)[0] for r in refs]
            group_key = keys[0]
            if any(k != group_key for k in keys) or group_key in self.groups:
                raise SnapshotError(
                    f"snapshot state.groups: the samples of a group (step {refs[0].step}) do not "
                    "share one group of batch_group_criterion: the snapshot was edited or "
                    "corrupted, or taken with another task encoder"
                )
            group = self.groups[group_key] = _Group(g.batch_size)
            group.waiting = [(r, samples[r]) for r in g.waiting]
            group.last = refs[-1]

    def _materialize(self, refs: list[SampleRef]) -> dict[SampleRef, Any]:
        """Each ref's encoded sample, encoded again as it was (one read per recipe step)."""
        by_step: dict[int, dict[int, tuple[int, int, int]]] = collections.defaultdict(dict)
        for r in refs:
            by_step[r.step][r.position] = (r.dataset, r.index, r.epoch)
        found: dict[tuple[int, int, int], Any] = {}
        assert self.key is not None
        for step, rows in sorted(by_step.items()):
            positions = sorted(rows)
            ids = [rows[p] for p in positions]
            recipe = Recipe(
                step=step,
                refs=Refs.of(
                    dataset=[d for d, _, _ in ids],
                    index=[i for _, i, _ in ids],
                    epoch=[e for _, _, e in ids],
                ),
                key=self.key,  # type: ignore[arg-type]
            )
            samples, kept = self.materializer.encode_at(recipe, positions)
            outputs: collections.Counter = collections.Counter()
            for sample, pos in zip(samples, kept):
                found[(step, pos, outputs[pos])] = sample
                outputs[pos] += 1
        out = {}
        for r in refs:
            sample = found.get((r.step, r.position, r.output), _MISSING)
            if sample is _MISSING:
                raise SnapshotError(
                    f"snapshot state.groups names output {r.output} of the sample at position "
                    f"{r.position} of step {r.step}, which its encoder no longer gives: the "
                    "snapshot was taken with another dataset or task encoder"
                )
            out[r] = sample
        return out

    # --- grouping ------------------------------------------------------------------------------

    def _criterion(self, sample: Any, ref: SampleRef) -> tuple[Any, int]:
        """Energon's rules for ``batch_group_criterion(sample) -> (group, batch_size)``."""
        keys = lambda: (self.materializer.key(ref.dataset, ref.index),)  # noqa: E731
        with naming_failures("batch_group_criterion", keys, ref.step, ref.position):
            out = self.encoder.batch_group_criterion(sample)
        name = f"{type(self.encoder).__name__}.batch_group_criterion"
        if not isinstance(out, tuple) or len(out) != 2:
            raise ConfigError(
                f"{name} returned {out!r} for sample {keys()[0]!r}; it must return "
                "(group, batch_size)"
            )
        group, size = out
        try:
            hash(group)
        except TypeError:
            raise ConfigError(
                f"{name} returned the group {group!r} for sample {keys()[0]!r}, which is not "
                "hashable; return a str, int, tuple or torch.Size"
            ) from None
        if self.fixed is not None:
            if size is not None:
                raise ConfigError(
                    f"{name} returned batch size {size!r} for group {group!r}, but batch_size="
                    f"{self.fixed} is set: one of the two must be None (as in Energon)"
                )
            size = self.fixed
        elif isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigError(
                f"{name} returned batch size {size!r} for group {group!r} (sample "
                f"{keys()[0]!r}); it must be an int >= 1, or None with a fixed batch_size"
            )
        known = self.groups.get(group)
        if known is not None and known.batch_size != size:
            raise ConfigError(
                f"{name} returned batch size {size} for group {group!r}, which had "
                f"{known.batch_size}: a group's batch size must not change"
            )
        return group, size

    def _state(self) -> GroupsState:
        return GroupsState(self.key or 0, tuple(g.refs() for g in self.groups.values()))

    def _flush(self, group: _Group) -> tuple[Any, int]:
        samples = [s for _, s in group.waiting]
        group.waiting = []
        enc = self.encoder
        return enc.encode_batch(enc.batch(samples)), len(samples)

    def feed(
        self, recipe: Recipe, result: Any, after: Any, epoch: int, state: LoaderState
    ) -> Iterator[tuple[Any, LoaderState]]:
        """Yield ``(batch, state)`` for each group this chunk's samples fill. ``after`` is the
        plan state after the chunk; its error-policy skips are counted when the state moves
        past its start (a restore that materializes it again counts them once)."""
        if self.key is None:
            self.key = int(recipe.key)
        elif int(recipe.key) != self.key:
            raise ConfigError(
                "grouped batching needs one plan key for the whole stream; a blend of planned "
                "datasets cannot group batches"
            )
        samples, positions = result.samples or [], result.positions or []
        refs = recipe.refs
        datasets, indices, epochs = refs.dataset.tolist(), refs.index.tolist(), refs.epoch.tolist()
        outputs: collections.Counter = collections.Counter()
        start, self.skip = self.skip, 0
        counted = False
        for k, (sample, pos) in enumerate(zip(samples, positions)):
            j = outputs[pos]
            outputs[pos] += 1
            if k < start:
                continue  # grouped before the state this run started from
            ref = SampleRef(recipe.step, pos, j, datasets[pos], indices[pos], epochs[pos])
            try:
                group_key, size = self._criterion(sample, ref)
            except SkipSample:  # Energon: the sample is skipped, and counted here
                self.skipped += 1
                continue
            group = self.groups.get(group_key)
            if group is None:
                group = self.groups[group_key] = _Group(size)
            group.waiting.append((ref, sample))
            group.last = ref
            if len(group.waiting) < group.batch_size:
                continue
            done = k + 1 == len(samples)  # the batch ends with this chunk
            counted = done
            batch, n = self._flush(group)
            state = msgspec.structs.replace(
                state,
                plan=after if done else self.before,
                batches=state.batches + 1,
                samples=state.samples + n,
                skipped=state.skipped + self.skipped + (result.skipped if done else 0),
                epoch=max(state.epoch, epoch),
                packs_taken=0 if done else k + 1,
                groups=self._state(),
            )
            self.skipped = 0
            self.last_state = state
            yield batch, state
        if not counted:
            self.skipped += result.skipped
        self.before = after

    def finish(self, end: Any, state: LoaderState) -> Iterator[tuple[Any, LoaderState]]:
        """At the end of the stream: each partly filled group as a batch, in the order the
        groups were first seen (or, with ``drop_last``, dropped and counted); then
        ``(None, state)`` with the groups cleared."""
        if not self.drop_last:
            for group in self.groups.values():
                if not group.waiting:
                    continue
                batch, n = self._flush(group)
                state = msgspec.structs.replace(
                    state,
                    plan=end,
                    batches=state.batches + 1,
                    samples=state.samples + n,
                    skipped=state.skipped + self.skipped,
                    packs_taken=0,
                    groups=self._state(),
                )
                self.skipped = 0
                self.last_state = state
                yield batch, state
        left = sum(len(g.waiting) for g in self.groups.values())
        self.groups = {}
        state = msgspec.structs.replace(
            state,
            plan=end,
            packs_taken=0,
            skipped=state.skipped + self.skipped,
            pack_remainder=state.pack_remainder + left,
            groups=None,
        )
        self.skipped = 0
        self.last_state = state
        yield None, state


_MISSING = object()
