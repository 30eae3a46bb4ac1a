"""A pipeline: a source plus the seed it runs with, and the state <-> bytes round trip.

Example:
    >>> from fpipe.plan import samples, repeat, batch
    >>> from fpipe.core import chain
    >>> p = Pipeline(chain(repeat(samples(10), num_epochs=1), batch(4)), seed=7)
    >>> state = p.init()
    >>> state, out = p.next(state)
    >>> p.next(p.restore(p.snapshot(state)))[1][0].refs == p.next(state)[1][0].refs
    True
"""

from __future__ import annotations

from typing import Any

import msgspec

from fpipe.core.advance import Passed, advance
from fpipe.core.errors import ConfigError
from fpipe.core.fingerprint import fingerprint
from fpipe.core.graph import (
    collect_stats,
    describe_steps,
    get_state,
    global_position,
    next_step,
    step_parts,
)
from fpipe.core.records import Config
from fpipe.core.rng import key
from fpipe.core.snapshot import decode_state, encode_state
from fpipe.core.stage import Source
from fpipe.core.state_check import check_state

__all__ = ["Pipeline", "PipelineConfig"]


class PipelineConfig(Config, frozen=True):
    """The pipeline-wide settings: the seed every key is derived from."""

    seed: int


class Pipeline(msgspec.Struct, frozen=True):
    """A :class:`~fpipe.core.stage.Source` bound to a seed; its state is one small value."""

    source: Source
    seed: int

    def __post_init__(self):
        if not isinstance(self.source, Source):
            raise ConfigError(f"Pipeline needs a Source, got {type(self.source).__name__}")

    @property
    def parts(self) -> tuple:
        """``(path, config)`` of the pipeline's own config and of every step, in data-flow
        order (see :func:`fpipe.core.graph.step_parts`): what the fingerprint covers."""
        return (("pipeline", PipelineConfig(seed=self.seed)),) + step_parts(self.source)

    @property
    def fingerprint(self) -> bytes:
        """16-byte hash of the configuration (compatible fields excluded)."""
        return fingerprint(self.parts)

    def describe(self) -> list[dict]:
        """The configuration as printable plain data: the pipeline's settings, then one dict
        per step (name, type, every config field), flat; a multi-input step nests its inputs."""
        own = {"name": "pipeline", "type": "PipelineConfig", "seed": self.seed}
        return [own, *describe_steps(self.source)]

    def get(self, state: Any, name: str) -> Any:
        """The state of the step called ``name`` in the pipeline state ``state``.

        Example: ``p.get(state, "window_shuffle").block``; inside input 0 of a multi-input
        step ``mix``: ``p.get(state, "mix/0/window_shuffle")``.
        """
        return get_state(self.source, state, name)

    def stats(self, state: Any) -> dict[str, dict[str, int]]:
        """Counters of every step that keeps some, by step name: ``{"filter": {"filtered": 3},
        "batch": {"batch_remainder": 0}, ...}``."""
        return collect_stats(self.source, state)

    def position(self, state: Any) -> tuple[int, int] | None:
        """``(epoch, refs taken)``: where ``state`` is in the global order, the same value on
        every rank in global mode (None for a plan without global distribution). ``epoch`` is
        the highest epoch of any ref taken so far, by any rank; it never goes back."""
        return global_position(self.source, state)

    def next_step(self, state: Any) -> int | None:
        """The global step of the next recipe from ``state`` (the batch step's count of
        recipes emitted), known without planning it: also where the stream has ended, or ends
        under the blend weights in force but not under weights changed at that step. None for
        a plan that makes no recipes."""
        return next_step(self.source, state)

    def init(self) -> Any:
        """The state before the first output."""
        return self.source.init(key(self.seed))

    def next(self, state: Any, n: int = 1) -> tuple[Any, Any]:
        """Up to ``n`` outputs and the state after them (an empty chunk at the end)."""
        return self.source.next(state, n)

    def skip(self, state: Any, n: int) -> tuple[Any, int]:
        """The state after the next ``n`` outputs and how many there were (fewer at the end
        of the stream): the state ``n`` calls of ``next(state, 1)`` reach, without building
        the outputs where the last step can count them (see ``Source.skip``)."""
        fast = self.source.skip
        if fast is not None:
            return fast(state, n)
        passed = 0
        while passed < n:
            state, out = self.source.next(state, 1)  # one at a time: the states next(1) reaches
            if not len(out):
                break
            passed += 1
        return state, passed

    def advance(self, state: Any, n: int) -> tuple[Any, Passed]:
        """The state :meth:`skip` reaches after the next ``n`` outputs (steps, for a source
        with ``next_steps``: a step that holds nothing for this rank counts), and a
        :class:`~fpipe.core.advance.Passed` of them (outputs, refs, highest epoch): computed
        on counts where the steps can (a seek far into a run), else by building the outputs
        (see :mod:`fpipe.core.advance`)."""
        return advance(self.source, state, n)

    def snapshot(self, state: Any) -> bytes:
        """Bytes that :meth:`restore` turns back into ``state`` (see :mod:`fpipe.core.snapshot`)."""
        return encode_state(self.parts, state)

    def restore(self, data: bytes) -> Any:
        """The state held in snapshot bytes, after checking they belong to this pipeline (the
        fingerprint), that its values are possible and each step's own ``check`` (see
        :mod:`fpipe.core.state_check`)."""
        state = decode_state(self.parts, self.source.state_type, data)
        check_state(self.source, state, self.init())
        return state
