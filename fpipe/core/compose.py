"""Composition: ``chain`` splices steps into one flat plan; over a source it yields a source.

``chain(a, b, c)`` of streaming stages is one streaming stage whose state is the tuple of the
parts' states (like optax's ``chain``); it remembers its members, so putting it in another chain
splices them in: ``chain(src, chain(a, b), c)`` *is* ``chain(src, a, b, c)`` (same steps, keys,
state and fingerprint). ``chain(source, a, b)`` is a :class:`Source`: every stage is *lifted*
over what precedes it, and the lifted state is a :class:`Lifted` record

    Lifted(up=<upstream state>, st=<stage state>, cur=<outputs of the block already taken>)

For a streaming stage ``up``/``st`` are the live states and ``cur`` is 0. For a block stage they
are the states at the *start* of the current block and ``cur`` indexes into that block's output:
the output is recomputed from them when needed (and memoized, which is invisible to callers
because everything is a pure function of the state). When a block is used up, the state moves
to the next block's start, so equal positions always have equal states.

Stage keys are ``step_key(root, stage.name)`` (see :mod:`fpipe.core.graph`): a stage's
randomness depends on its name, not on how the chain was parenthesized. Names in one plan must
therefore be unique (checked when the chain is built).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

from fpipe.core.advance import Passed, advance, advance_by_next, passed_of
from fpipe.core.errors import ConfigError, SnapshotError
from fpipe.core.graph import check_unique_names, step_key, step_parts
from fpipe.core.records import Config, Refs, State
from fpipe.core.stage import Source, Stage

__all__ = ["ChainConfig", "Lifted", "chain", "concat_chunks", "lift"]

U = TypeVar("U")
S = TypeVar("S")


class Lifted(State, Generic[U, S], frozen=True, array_like=True):
    """State of a stage lifted over its upstream (see the module docstring)."""

    up: U
    st: S
    cur: int = 0


class ChainConfig(Config, frozen=True):
    """Config of a chain of streaming stages: each member's name and *whole* config, in order
    (a chain is spliced into any pipeline it is put in, where each member is its own step)."""

    steps: tuple[tuple[str, Config], ...]


def concat_chunks(chunks: list) -> Any:
    """Concatenate chunks of one kind (Refs, or tuples of outputs)."""
    if not chunks:
        return ()
    if isinstance(chunks[0], Refs):
        return Refs.concat(chunks)
    if len(chunks) == 1:
        return chunks[0]
    return tuple(x for c in chunks for x in c)


def _members(stage: Stage) -> tuple[Stage, ...]:
    return stage.members or (stage,)


@overload
def chain(source: Source, /, *stages: Stage) -> Source: ...
@overload
def chain(*stages: Stage) -> Stage: ...
def chain(*parts: Source | Stage) -> Source | Stage:
    """Compose stages (all streaming) into one stage, or a source and stages into a source.

    Example:
        >>> from fpipe.plan import samples, repeat, batch
        >>> src = chain(repeat(samples(5), num_epochs=1), batch(2, drop_last=False))
        >>> state = src.init(0)
        >>> state, out = src.next(state, 1)
        >>> out[0].refs.index.tolist()
        [0, 1]
    """
    if not parts:
        raise ConfigError("chain() needs at least one stage")
    if isinstance(parts[0], Source):
        src = parts[0]
        for i, stage in enumerate(parts[1:], 1):
            if not isinstance(stage, Stage):
                raise ConfigError(
                    f"chain part {i} is a {type(stage).__name__}; only the first part may be a "
                    "Source"
                )
            for member in _members(stage):
                src = lift(src, member)
        return src
    members: tuple[Stage, ...] = ()
    for i, stage in enumerate(parts):
        if not isinstance(stage, Stage):
            raise ConfigError(f"chain part {i} is a {type(stage).__name__}, not a Stage")
        if stage.block_size is not None:
            raise ConfigError(
                f"stage {stage.name!r} works on blocks of {stage.block_size}; compose it over a "
                "source with chain(source, ...) so its blocks can be re-read on restore"
            )
        members += _members(stage)
    check_unique_names(m.name for m in members)
    return _chain_stages(members)


def _parametrize(generic: Any, args: tuple) -> Any:
    """``generic[args]`` for type arguments known only at run time (the state types snapshots
    are decoded with), which a type checker cannot read as a type expression."""
    return generic[args]


def _chain_stages(stages: tuple[Stage, ...]) -> Stage:
    def init(key):
        return tuple(s.init(step_key(key, s.name)) for s in stages)

    def step(states, chunk):
        new = []
        for s, st in zip(stages, states):
            st, chunk = s.step(st, chunk)
            new.append(st)
        return tuple(new), chunk

    def flush(states):
        new, out = [], None
        for s, st in zip(stages, states):
            if out is not None and len(out):
                st, out = s.step(st, out)
                st, more = s.flush(st)
                out = concat_chunks([out, more]) if len(more) else out
            else:
                st, out = s.flush(st)
            new.append(st)
        return tuple(new), out if out is not None else ()

    return Stage(
        name="+".join(s.name for s in stages),
        config=ChainConfig(steps=tuple((s.name, s.config) for s in stages)),
        init=init,
        step=step,
        flush=flush,
        state_type=_parametrize(tuple, tuple(s.state_type for s in stages)),
        members=stages,
    )


def lift(upstream: Source, stage: Stage) -> Source:
    """Run ``stage`` over ``upstream``: the result is a pull source (see module docstring)."""
    state_type = _parametrize(Lifted, (upstream.state_type, stage.state_type))
    up_next = upstream.next
    skip_fn: Callable[[Any, int], tuple[Any, int]] | None = None
    advance_fn: Callable[[Any, int], tuple[Any, Passed]] | None = None

    def init(key):
        return Lifted(upstream.init(key), stage.init(step_key(key, stage.name)), 0)

    if stage.block_size is None:

        def next_streaming(state, n):
            up, st = state.up, state.st
            while True:
                up, chunk = up_next(up, n)
                if not len(chunk):
                    st, out = stage.flush(st)
                    if len(out) > n:
                        raise RuntimeError(f"streaming stage {stage.name!r} flushed > n outputs")
                    return Lifted(up, st, 0), out
                st, out = stage.step(st, chunk)
                if len(out):
                    return Lifted(up, st, 0), out

        next_fn = next_streaming
    else:
        bs = stage.block_size  # an int, or the block's size from the state at its start
        sizer: Callable[[Any], int] = (lambda _st: bs) if isinstance(bs, int) else bs
        memo: OrderedDict = OrderedDict()  # (up, st) at block start -> (up, st, out) at block end

        def read_block(up, st):
            """The input block that starts at ``(up, st)``: (upstream state after it, items,
            how many; 0 at the end of the stream)."""
            block_size = sizer(st)
            got, total, up_end = [], 0, up
            while total < block_size:
                up_end, chunk = up_next(up_end, block_size - total)
                m = len(chunk)
                if not m:
                    break
                got.append(chunk)
                total += m
            return up_end, got[0] if len(got) == 1 else concat_chunks(got), total

        def compute_block(up, st):
            k = (up, st)
            hit = memo.get(k)
            if hit is not None:
                return hit
            up_end, items, total = read_block(up, st)
            if total:
                st_end, out = stage.step(st, items)
            else:
                st_end, out = stage.flush(st)
            result = (up_end, st_end, out, len(out), total == 0)
            memo[k] = result
            if len(memo) > 2:
                memo.popitem(last=False)
            return result

        def check_cursor(cur: int, size: int) -> None:
            if cur > size:
                raise SnapshotError(
                    f"snapshot state of step {stage.name!r}: cursor {cur} is past the "
                    f"{size} outputs of its block: the snapshot was edited or corrupted"
                )

        def next_block(state, n):
            while True:
                up_end, st_end, out, size, at_end = compute_block(state.up, state.st)
                cur = state.cur
                check_cursor(cur, size)
                if cur < size:
                    end = cur + n
                    if end < size:
                        return Lifted(state.up, state.st, end), out[cur:end]
                    # Block used up: move to the next block's start (after a flush, the flushed
                    # state, whose next flush yields nothing). Taking a whole block copies
                    # nothing.
                    return Lifted(up_end, st_end, 0), out[cur:] if cur else out
                if at_end:
                    return Lifted(up_end, st_end, 0), out[:0]
                state = Lifted(up_end, st_end, 0)  # a block with no output: go on to the next

        next_fn = next_block
        count_step = stage.skip

        def count_block(up, st):
            """compute_block's (state after, outputs, at end) with the outputs counted by
            ``stage.skip`` instead of built (or taken from the memo when there)."""
            hit = memo.get((up, st))
            if hit is not None:
                return hit[0], hit[1], hit[3], hit[4]
            up_end, items, total = read_block(up, st)
            if not total:
                st_end, out = stage.flush(st)
                return up_end, st_end, len(out), True
            assert count_step is not None
            st_end, size = count_step(st, items)
            return up_end, st_end, size, False

        def skip_block(state, n):
            # next_block's walk over blocks, counting outputs: the same states it reaches
            passed = 0
            while passed < n:
                up_end, st_end, size, at_end = count_block(state.up, state.st)
                cur = state.cur
                check_cursor(cur, size)
                if cur < size:
                    take = min(n - passed, size - cur)
                    passed += take
                    if cur + take < size:
                        return Lifted(state.up, state.st, cur + take), passed
                elif at_end:
                    return Lifted(up_end, st_end, 0), passed
                state = Lifted(up_end, st_end, 0)
            return state, passed

        if count_step is not None:
            skip_fn = skip_block

        fast = stage.advance
        if fast is not None and (isinstance(bs, int) or fast.span is not None):
            fast_run, fast_span, per = fast.run, fast.span, fast.outputs
            outputs_of: Callable[[Any], int] = (lambda _st: per) if isinstance(per, int) else per

            def whole_blocks(state, k):
                """``(state, Passed)`` after ``k`` whole blocks from a block start, on counts
                (fewer where the stream ends within them: the whole ones before its end), or
                None (no whole block, or the stage cannot count them); and whether less than
                a block is left after that (the stream ends there)."""
                if upstream.advance is None:
                    return None, False  # its input builds every block: counting saves nothing
                size = sizer(state.st)
                up_end, got = advance(upstream, state.up, k * size)
                ends = got.outputs < k * size
                if ends:  # the whole blocks before the end, once more
                    k = got.outputs // size
                    if not k:
                        return None, True
                    up_end, got = advance(upstream, state.up, k * size)
                moved = fast_run(state.st, k, got)
                if moved is None:
                    return None, False
                return (Lifted(up_end, moved[0], 0), moved[1]), ends

            def advance_blocks(state, n):
                # next_block's walk: the block part way through the ordinary way, then the
                # whole blocks on counts, then what is left of the last one the ordinary way
                total = Passed()
                if state.cur:
                    state, out = next_block(state, n)
                    total = passed_of(out)
                    if not len(out):
                        return state, total
                ends = False
                while not ends:  # runs of whole blocks of one size (one for a fixed size)
                    per_block = outputs_of(state.st)
                    k = (n - total.outputs) // per_block if per_block > 0 else 0
                    same = fast_span(state.st) if fast_span is not None else None
                    take = k if same is None else min(k, same)
                    if not take:
                        break
                    moved, ends = whole_blocks(state, take)
                    if moved is None:
                        break
                    state, total = moved[0], total + moved[1]
                # what is left: at most a block and its flush where the stream ends
                state, rest = advance_by_next(lifted, state, n - total.outputs, bounded=ends)
                return state, total + rest

            advance_fn = advance_blocks

    block_read = None if stage.block_size is None else compute_block

    def drawn(state):
        # A block part way through (cur > 0) has read its input to the block's end.
        up = state.up
        if block_read is not None and state.cur:
            up = block_read(state.up, state.st)[0]
        inner = upstream.drawn
        return Lifted(up if inner is None else inner(up), state.st, state.cur)

    lifted = Source(
        name=stage.name,
        config=stage.config,
        init=init,
        next=next_fn,
        state_type=state_type,
        inputs=(upstream,),
        split=_split_lifted,
        stats=stage.stats,
        position=stage.position,
        step_count=stage.step_count,
        skip=skip_fn,
        drawn=drawn,
        advance=advance_fn,
    )
    step_parts(lifted)  # refuses two steps with one name, when the chain is built
    return lifted


def _split_lifted(state: Lifted) -> tuple[Any, tuple]:
    return state.st, (state.up,)
