"""Snapshot format 4 (bytes kept as bytes, integer lists as arrays, 1-byte field digests),
format 5 (the part digests of many parts of one step pattern folded into one entry) and the
format 3 and 4 snapshots written before them, which still restore."""

from __future__ import annotations

import numpy as np
import pytest

from fpipe.core import Pipeline, chain
from fpipe.core.errors import SnapshotMismatchError
from fpipe.core.snapshot import FORMAT_VERSION, read_envelope, unpack
from fpipe.loader.steering import MixChange, apply_change
from fpipe.plan import batch, blend, distribute, samples, slice_shuffle, window_shuffle
from fpipe.plan.online_mix import entry_weights, weights32

#: ``plan().snapshot(state())`` as fpipe wrote it in format 3 (before format 4).
V3_SNAPSHOT = bytes.fromhex(
    "96ae66706970652d736e617073686f740302c41018021165838f749c39fab519a44359ef92c48f78da9b3d79"
    "454166416a4e665eeaba0028c3393f2f2d339d71f2faa49cd4bc147d03fde2c4dc829cd4e2b5c1101a22cf3a"
    "792b5c3e27333935be38a3342d2d2775533088170ce1a0196548c02843e28d322260941111462d052b5ded04"
    "2261dad79567e6a5e497c3f46d0e0773d134ae4ac92c2e29ca4c2a2d49dde00267228c4d2c49ce58ed0422a1"
    "6200b3f690b6c436fd8e3c6b2b00ead20a362b00afd05df32b0080d00a362b00afd0c00b2b008c6f0a362b00"
    "afd0229d8af9fec5ee344b9828cfa753a753c501424c030000004c030000004c030000004c0500000049d859"
    "021045b2223a4914000000000000004c03000000490a00000000000000490600000000000000490400000000"
    "00000053680000004a6a623465506834544151414141424a41514141414141414141424a4177414141414141"
    "414142434341414141506c58317a38547a776236544145414141424d4167414141456b554141414141414141"
    "4145494d41414141414143415077414141414141414142415318000000414141414141414141414141414141"
    "4141414141414141414c0200000049f6c538c67a4de5224902000000000000004908000000000000004c0300"
    "0000490000000000000000490000000000000000491c000000000000004900000000000000004c0300000049"
    "fecc94ddf6245e114907000000000000004900000000000000004900000000000000005a00452ec38da9b9"
)

#: The same snapshot as fpipe wrote it in format 4 (before format 5).
V4_SNAPSHOT = bytes.fromhex(
    "96ae66706970652d736e617073686f740402c41018021165838f749c39fab519a44359ef92c48f78da9b3d79"
    "454166416a4e665eeaba0028c3393f2f2d339d71f2faa49cd4bc147d03fde2c4dc829cd4e2b5c1101a22cf3a"
    "792b5c3e27333935be38a3342d2d2775533088170ce1a0196548c02843e28d322260941111462d052b5ded04"
    "2261dad79567e6a5e497c3f46d0e0773d134ae4ac92c2e29ca4c2a2d49dde00267228c4d2c49ce58ed0422a1"
    "6200b3f690b6c41bcf729ba10c9be5709bbe0c9be5379b4f0c9be5ad35f131d98b5858c501174c030000004c"
    "030000004c030000004c0500000049d859021045b2223a49140000000000000041030000000a000000000000"
    "0006000000000000000400000000000000424e0000002636f878f8784c040000004901000000000000004903"
    "000000000000004208000000f957d73f13cf06fa4c010000004c02000000491400000000000000420c000000"
    "0000803f000000000000004042120000000000000000000000000000000000000000004102000000f6c538c6"
    "7a4de52202000000000000004908000000000000004103000000000000000000000000000000000000001c00"
    "0000000000004900000000000000004103000000fecc94ddf6245e1107000000000000000000000000000000"
    "490000000000000000338b0917fdeb80ec"
)


def plan(window: int = 10) -> Pipeline:
    rng = np.random.default_rng(0)
    views = [
        slice_shuffle(samples(n, dataset=d, columns={"tokens": rng.integers(1, 30, n)}), 4)
        for d, n in enumerate((30, 17, 11))
    ]
    head = blend(views, weights=[2, 1, 1], unit="tokens")
    return Pipeline(chain(head, window_shuffle(window), distribute(4), batch(4)), seed=5)


def state(p: Pipeline):
    """Three steps, a change of weights, four more steps: a blend state with online weights
    and unit counters (bytes fields)."""
    s = p.init()
    for _ in range(3):
        s, _ = p.next(s, 1)
    s = apply_change(p, s, MixChange(3, entry_weights(weights32([1, 0, 2]))))
    for _ in range(4):
        s, _ = p.next(s, 1)
    return s


def test_a_format_3_snapshot_restores_and_continues_as_before():
    assert read_envelope(V3_SNAPSHOT).format_version == 3 < FORMAT_VERSION
    p = plan()
    restored = p.restore(V3_SNAPSHOT)
    assert restored == state(plan())
    a, b = p.next(restored, 1)[1], plan().next(state(plan()), 1)[1]
    assert a[0].refs.triples() == b[0].refs.triples()


def test_a_format_4_snapshot_restores_and_continues_as_before():
    assert read_envelope(V4_SNAPSHOT).format_version == 4 < FORMAT_VERSION
    p = plan()
    restored = p.restore(V4_SNAPSHOT)
    assert restored == state(plan())
    a, b = p.next(restored, 1)[1], plan().next(state(plan()), 1)[1]
    assert a[0].refs.triples() == b[0].refs.triples()


def test_format_4_keeps_bytes_and_integer_lists_compact():
    p = plan()
    data = p.snapshot(state(p))
    env = read_envelope(data)
    assert env.format_version == FORMAT_VERSION >= 4
    blend_state = unpack(env.payload)[0][0][0]  # batch.up.up.up
    assert isinstance(blend_state[3], bytes) and isinstance(blend_state[4], bytes)
    assert b"A" + (3).to_bytes(4, "little") in env.payload  # taken: one array of 3 integers
    assert len(data) < len(V3_SNAPSHOT) - 40
    assert p.restore(data) == state(p)


@pytest.mark.parametrize(
    "data", [V3_SNAPSHOT, V4_SNAPSHOT, None], ids=["format3", "format4", "current"]
)
def test_a_changed_config_is_named_in_either_format(data):
    data = data or plan().snapshot(state(plan()))
    with pytest.raises(SnapshotMismatchError, match="'window_shuffle': field 'window_size'"):
        plan(window=12).restore(data)
