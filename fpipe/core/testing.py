"""Contract checks every step and pipeline must pass; used by tests/ and property_tests/ (and by
the contract sweep over every public plan step, tests/plan/test_contract_sweep.py).

Each check takes a *factory* that builds a fresh :class:`~fpipe.core.pipeline.Pipeline`, so a
restored run shares nothing with the run that took the snapshot but the bytes.

Example:
    >>> from fpipe.core import Pipeline, chain
    >>> from fpipe.plan import batch, repeat, samples, window_shuffle
    >>> make = lambda: Pipeline(chain(repeat(samples(50), 2), window_shuffle(8), batch(4)), 3)
    >>> check_pipeline(make, cut_points=[0, 5, 24])
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from fpipe.core.compose import chain
from fpipe.core.errors import SnapshotMismatchError
from fpipe.core.pipeline import Pipeline
from fpipe.core.records import Recipe, Refs
from fpipe.core.stage import Source, Stage

__all__ = [
    "assert_bounded_state",
    "assert_config_reaches_fingerprint",
    "assert_exact_resume",
    "assert_pure",
    "check_pipeline",
    "check_stage",
    "outputs_equal",
    "run",
]

Factory = Callable[[], Pipeline]


MAX_OUTPUTS = 200_000  # a finite test stream longer than this is taken as a stage bug


def run(pipeline: Pipeline, state: Any = None, limit: int | None = None) -> tuple[Any, list]:
    """Pull outputs one at a time until the end (or ``limit`` outputs); returns (state, list).

    Without a limit, a stream that does not end within ``MAX_OUTPUTS`` outputs fails the check
    instead of hanging the test run.
    """
    state = pipeline.init() if state is None else state
    out: list = []
    while limit is None or len(out) < limit:
        if limit is None and len(out) >= MAX_OUTPUTS:
            raise AssertionError(f"stream did not end after {MAX_OUTPUTS} outputs")
        state, chunk = pipeline.next(state, 1)
        if not len(chunk):
            break
        out.extend(_items(chunk))
    return state, out


def _items(chunk) -> list:
    if isinstance(chunk, Refs):
        return [chunk[i : i + 1] for i in range(len(chunk))]
    return list(chunk)


def _same(a, b) -> bool:
    if isinstance(a, Recipe) and isinstance(b, Recipe):
        same = (a.step, a.key, a.bucket, a.shape, a.part) == (
            b.step,
            b.key,
            b.bucket,
            b.shape,
            b.part,
        )
        return same and a.refs == b.refs and outputs_equal(a.mix, b.mix)
    return bool(a == b)


def outputs_equal(a: Sequence, b: Sequence) -> bool:
    """True when two output lists are equal element for element (refs column-equal)."""
    return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))


def _describe(outputs: Sequence, limit: int = 3) -> str:
    return ", ".join(
        repr(o.refs.triples() if isinstance(o, Recipe) else o.triples()) for o in outputs[:limit]
    )


def assert_exact_resume(
    make: Factory,
    cut_points: Iterable[int],
    limit: int | None = None,
    *,
    reference: Sequence | None = None,
):
    """Snapshot after k outputs, restore the bytes in a fresh pipeline: the rest must match.

    ``reference``: the outputs of ``run(make(), limit=limit)`` when the caller has them already
    (to draw the cut points from, say); they are not computed again.
    """
    if reference is None:
        _, reference = run(make(), limit=limit)
    for k in cut_points:
        k = min(k, len(reference))
        first = make()
        state, head = run(first, limit=k)
        data = first.snapshot(state)
        fresh = make()
        restored = fresh.restore(data)
        assert fresh.snapshot(restored) == data, f"restore(snapshot(s)) != s at cut {k}"
        rest_limit = None if limit is None else limit - k
        _, tail = run(fresh, restored, limit=rest_limit)
        got = head + tail
        if not outputs_equal(got, reference):
            i = next(
                (i for i, (x, y) in enumerate(zip(got, reference)) if not _same(x, y)),
                min(len(got), len(reference)),
            )
            raise AssertionError(
                f"resume at cut {k} diverges at output {i}: got {_describe(got[i:])} "
                f"expected {_describe(reference[i:])} (lengths {len(got)} vs {len(reference)})"
            )


def assert_pure(make: Factory, limit: int | None = None) -> None:
    """Two runs with the global RNGs perturbed differently give the same outputs and states."""
    runs = []
    for seed in (0, 12345):
        random.seed(seed)
        np.random.seed(seed)  # noqa: NPY002 - perturbing the global RNG is the point
        p = make()
        state, out = run(p, limit=limit)
        runs.append((p.snapshot(state), out))
    assert runs[0][0] == runs[1][0], "final states differ between two identical runs"
    assert outputs_equal(runs[0][1], runs[1][1]), "outputs differ between two identical runs"


def assert_bounded_state(make: Factory, points: Iterable[int]) -> list[int]:
    """Snapshot sizes at every point are equal (state never grows with the step)."""
    p = make()
    state = p.init()
    sizes, done = [], 0
    for k in sorted(points):
        state, _ = run(p, state, limit=k - done)
        done = k
        sizes.append(len(p.snapshot(state)))
    assert len(set(sizes)) == 1, f"snapshot size changes with the step: {dict(zip(points, sizes))}"
    return sizes


def check_pipeline(make: Factory, *, cut_points: Iterable[int], limit: int | None = None):
    """Exact resume at ``cut_points``, purity and a constant snapshot size."""
    cut_points = list(cut_points)
    assert_exact_resume(make, cut_points, limit=limit)
    assert_pure(make, limit=limit)
    assert_bounded_state(make, [0, *cut_points])


def check_stage(
    stage_factory: Callable[[], Stage],
    source_factory: Callable[[], Source],
    *,
    cut_points,
    seed: int = 0,
):
    """Run the full contract on one stage fed by a fresh ``source_factory()`` (for example
    ``lambda: repeat(in_memory(refs), 2)``)."""

    def make():
        return Pipeline(chain(source_factory(), stage_factory()), seed)

    check_pipeline(make, cut_points=cut_points)


def assert_config_reaches_fingerprint(
    make_base: Factory, make_variant: Factory, step: str, field: str, *, steps: int = 2
) -> None:
    """Changing ``field`` of step ``step`` changes the fingerprint, and restoring a snapshot of
    the base pipeline into the variant is refused with a message naming the step and field.

    A field the config declares ``compatible`` must do the opposite: same fingerprint, and the
    restore is accepted, unless the step checks that field against its restored state itself:
    then a refusal must name the step and the field too (a blend's ``draw``).
    """
    base, variant = make_base(), make_variant()
    config = dict(base.parts).get(step)
    assert config is not None, f"no step {step!r} in {[p for p, _ in base.parts]}"
    assert field in config.__struct_fields__, f"{type(config).__name__} has no field {field!r}"
    state, _ = run(base, limit=steps)
    data = base.snapshot(state)
    if field in type(config).compatible:
        assert base.fingerprint == variant.fingerprint, f"compatible field {step}.{field} refused"
        try:
            variant.restore(data)
        except SnapshotMismatchError as e:  # checked by the step: it must say what differs
            msg = str(e)
            assert repr(step) in msg and repr(field) in msg, (
                f"compatible field {step}.{field} refused without naming it: {msg}"
            )
        return
    assert base.fingerprint != variant.fingerprint, (
        f"changing {step}.{field} does not change the pipeline fingerprint: the config field "
        "does not reach the fingerprint (is it missing from the step's Config?)"
    )
    try:
        variant.restore(data)
    except SnapshotMismatchError as e:
        msg = str(e)
        assert repr(step) in msg and repr(field) in msg, (
            f"restore refused without naming step {step!r} and field {field!r}: {msg}"
        )
    else:
        raise AssertionError(f"restore accepted a snapshot taken with another {step}.{field}")
