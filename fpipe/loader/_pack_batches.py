"""Batches of packs from packing buffers, with a state that points inside a buffer.

With Energon's packing hooks (``packing_buffer_size``) each recipe is one buffer and a worker
returns the buffer's packed samples; the number of packs per buffer is only known then. The
loader takes packs in plan order and makes batches of ``batch_size`` packs, so a batch may take
the last packs of one buffer and the first packs of the next (the leftovers carry over).

The loader state after a batch is ``(plan state at the start of the buffer holding the next
pack, packs of that buffer already delivered)``. A restore re-materializes that one buffer (a
pure function of its recipe, so its packs are bit-identical in any worker) and skips the packs
already delivered: exact resume, for any number of workers, recomputing one buffer.
"""

from __future__ import annotations

from typing import Any

import msgspec

from fpipe.loader.state import LoaderState

__all__ = ["PackBatcher"]


class PackBatcher:
    """Turns buffer results into ``(batch, loader state)`` pairs; one per loader iteration.

    ``start`` is the loader state iteration begins from; its ``packs_taken`` packs of the first
    buffer were delivered before (they are skipped).
    """

    def __init__(self, encoder: Any, batch_size: int, drop_last: bool, start: LoaderState):
        self.encoder, self.batch_size, self.drop_last = encoder, batch_size, drop_last
        self.before = start.plan  # plan state at the start of the next buffer
        self.skip = start.packs_taken
        self.carry: list = []  # packs taken from buffers, not yet delivered
        self.carry_samples = 0
        self.skipped = 0  # error-policy skips of buffers the state has moved past

    def _batch(self, packs: list) -> Any:
        enc = self.encoder
        return enc.encode_batch(enc.batch(packs))

    def feed(self, result, after: Any, epoch: int, state: LoaderState):
        """Yield ``(batch, state)`` for each batch completed by this buffer's packs.

        ``after`` is the plan state after this buffer. A buffer's error-policy skips are counted
        when the state moves past its start, so a restore that recomputes it counts them once.
        """
        packs, sizes = result.packs or [], result.pack_sizes or []
        start, self.skip = self.skip, 0
        counted = False
        for pos in range(start, len(packs)):
            self.carry.append(packs[pos])
            self.carry_samples += sizes[pos]
            if len(self.carry) < self.batch_size:
                continue
            done = pos + 1 == len(packs)  # the batch ends with this buffer
            counted = done
            state = LoaderState(
                after if done else self.before,
                state.batches + 1,
                state.samples + self.carry_samples,
                state.skipped + self.skipped + (result.skipped if done else 0),
                max(state.epoch, epoch),
                0 if done else pos + 1,
                state.pack_remainder,
            )
            batch = self._batch(self.carry)
            self.carry, self.carry_samples, self.skipped = [], 0, 0
            yield batch, state
        if not counted:
            self.skipped += result.skipped
        self.before = after

    def finish(self, end: Any, state: LoaderState):
        """At the end of the stream: the short final batch (kept or dropped and counted)."""
        if self.carry and not self.drop_last:
            state = LoaderState(
                end,
                state.batches + 1,
                state.samples + self.carry_samples,
                state.skipped + self.skipped,
                state.epoch,
                0,
                state.pack_remainder,
            )
            yield self._batch(self.carry), state
        else:
            state = msgspec.structs.replace(
                state,
                plan=end,
                packs_taken=0,
                skipped=state.skipped + self.skipped,
                pack_remainder=state.pack_remainder + self.carry_samples,
            )
            yield None, state
        self.carry, self.carry_samples, self.skipped = [], 0, 0
