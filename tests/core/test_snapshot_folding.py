"""Snapshot format 5: the part digests of many parts of one step pattern (the datasets of a
large blend) are one entry, so a blend's snapshot does not carry 2 step names and 6 field
hashes per dataset; a changed dataset is still refused, naming the step pattern and field."""

from __future__ import annotations

import pytest

from fpipe.core import Pipeline, chain
from fpipe.core import snapshot as snap
from fpipe.core.errors import SnapshotMismatchError
from fpipe.core.fingerprint import FOLD_FROM
from fpipe.core.snapshot import read_envelope, unpack_parts
from fpipe.plan import batch, blend, distribute, samples, slice_shuffle

N = FOLD_FROM + 6


def plan(sizes=None) -> Pipeline:
    sizes = sizes or [10 + d % 7 for d in range(N)]
    views = [slice_shuffle(samples(n, dataset=d), 4) for d, n in enumerate(sizes)]
    head = blend(views, weights=[1 + d % 3 for d in range(N)])
    return Pipeline(chain(head, distribute(2), batch(4)), seed=9)


def _advanced(p: Pipeline, steps: int = 5):
    s = p.init()
    for _ in range(steps):
        s, _ = p.next(s, 1)
    return s


def test_many_parts_of_one_pattern_are_one_digest_entry():
    p = plan()
    env = read_envelope(p.snapshot(_advanced(p)))
    parts = unpack_parts(env.parts, env.format_version)
    counts = {name: count for name, _, _, count in parts}
    assert counts["blend/*/samples"] == counts["blend/*/slice_shuffle"] == N
    assert len(parts) < 10  # not 2 per dataset
    assert len(env.parts[0]) + len(env.parts[1]) < 300


def test_a_changed_dataset_is_refused_naming_its_pattern():
    p = plan()
    data = p.snapshot(_advanced(p))
    sizes = [10 + d % 7 for d in range(N)]
    sizes[17] += 1
    with pytest.raises(SnapshotMismatchError, match=r"steps 'blend/\*/samples' \(70 of them\)"):
        plan(sizes).restore(data)


def test_restore_continues_the_uninterrupted_stream():
    p = plan()
    data = p.snapshot(_advanced(p, 3))
    restored, whole = p.restore(data), _advanced(p, 3)
    assert restored == whole
    for _ in range(3):
        (restored, a), (whole, b) = p.next(restored, 1), p.next(whole, 1)
        assert a[0].refs.triples() == b[0].refs.triples()


def test_a_format_4_snapshot_of_a_large_blend_still_restores(monkeypatch):
    p = plan()
    state = _advanced(p)
    monkeypatch.setattr(snap, "FORMAT_VERSION", 4)  # writes the unfolded digests of format 4
    old = p.snapshot(state)
    monkeypatch.undo()
    assert read_envelope(old).format_version == 4
    assert len(old) > len(p.snapshot(state)) + N  # every part named and hashed
    assert p.restore(old) == state
    sizes = [10 + d % 7 for d in range(N)]
    sizes[3] += 1
    with pytest.raises(SnapshotMismatchError, match="step 'blend/3/samples': field 'num_samples'"):
        plan(sizes).restore(old)


def test_a_2000_dataset_blend_with_changed_weights_stays_small_and_resumes():
    """Per dataset the snapshot holds the blend's counter (8 bytes), its weight digest (2) and
    its changed weight (4): no step name or field hash of its own."""
    from fpipe.loader.steering import MixChange, apply_change

    n = 2000
    views = [slice_shuffle(samples(5 + d % 11, dataset=d), 4) for d in range(n)]
    p = Pipeline(chain(blend(views, weights=[1.0 + d % 5 for d in range(n)]), batch(8)), seed=4)
    s = _advanced(p, 2)
    s = apply_change(p, s, MixChange(2, tuple(float(1 + d % 3) for d in range(n))))
    s = _advanced_from(p, s, 2)
    data = p.snapshot(s)
    assert len(data) <= 14 * n + 1024, len(data)
    restored = p.restore(data)
    assert restored == s
    for _ in range(3):
        (restored, a), (s, b) = p.next(restored, 1), p.next(s, 1)
        assert a[0].refs.triples() == b[0].refs.triples()


def _advanced_from(p: Pipeline, s, steps: int):
    for _ in range(steps):
        s, _ = p.next(s, 1)
    return s
