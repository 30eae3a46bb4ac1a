"""Snapshot envelope: round trips, and clear refusals of bad bytes."""

import msgspec
import pytest

from fpipe.core import Pipeline, SnapshotError, SnapshotMismatchError, chain
from fpipe.core.snapshot import pack, unpack
from fpipe.core.testing import run
from fpipe.plan import batch, repeat, samples
from tests.helpers import fast_forward, six_stage


def _advanced(p, steps=7):
    s = p.init()
    for _ in range(steps):
        s, _ = p.next(s)
    return s


def test_round_trip_is_identity():
    p = six_stage(num_samples=5000, window=100)
    s = _advanced(p)
    data = p.snapshot(s)
    assert p.restore(data) == s
    assert p.snapshot(p.restore(data)) == data


@pytest.mark.parametrize(
    "value",
    [None, True, False, 0, -1, 2**63 - 1, -(2**63), 2**64 - 1, 1.5, "x", b"\x00", [1, [2, "a"]]],
)
def test_pack_round_trip(value):
    assert unpack(pack(value)) == value


def test_pack_is_fixed_width_for_ints():
    assert len(pack([0, 0, 0])) == len(pack([10**15, -(10**12), 2**62]))


def test_truncated_bytes():
    p = six_stage(num_samples=5000, window=100)
    data = p.snapshot(_advanced(p))
    for cut in (0, 1, 8, len(data) // 2, len(data) - 1):
        with pytest.raises(SnapshotError):
            p.restore(data[:cut])


def test_corrupted_bytes_name_the_checksum():
    p = six_stage(num_samples=5000, window=100)
    data = bytearray(p.snapshot(_advanced(p)))
    data[len(data) // 2] ^= 0xFF
    with pytest.raises(SnapshotError, match="checksum|not an fpipe"):
        p.restore(bytes(data))


def test_foreign_bytes():
    p = six_stage(num_samples=5000, window=100)
    for junk in (
        b"PK\x03\x04" + b"\x00" * 40,
        msgspec.msgpack.encode({"a": 1}) + b"\x00" * 8,
        "str",
    ):
        with pytest.raises(SnapshotError):
            p.restore(junk)


def test_pickle_payload_is_refused_without_running_it():
    import pickle  # noqa: S403 - only to build hostile bytes

    class Boom:
        def __reduce__(self):
            return (exec, ("raise SystemExit('ran code')",))

    with pytest.raises(SnapshotError):
        six_stage().restore(pickle.dumps(Boom()))


def test_mismatched_config_names_stage_and_field():
    a = six_stage(num_samples=5000, window=100)
    b = six_stage(num_samples=5000, window=200)
    data = a.snapshot(_advanced(a))
    with pytest.raises(SnapshotMismatchError, match=r"window_shuffle.*window_size"):
        b.restore(data)
    c = six_stage(num_samples=5000, window=100, seed=2)
    with pytest.raises(SnapshotMismatchError, match=r"pipeline.*seed"):
        c.restore(data)


def test_mismatched_structure_names_parts():
    a = six_stage(num_samples=5000, window=100)
    other = Pipeline(chain(repeat(samples(5000)), batch(32)), seed=1)
    with pytest.raises(SnapshotMismatchError, match="parts"):
        other.restore(a.snapshot(_advanced(a)))


def test_world_size_is_a_compatible_change():
    a = six_stage(num_samples=5000, window=100, world_size=2, rank=0, batch_size=16)
    b = six_stage(num_samples=5000, window=100, world_size=4, rank=3, batch_size=8)
    data = a.snapshot(_advanced(a))
    b.restore(data)  # same global batch of 32: accepted
    # Another global batch size is accepted too and continues at the first unconsumed ref.
    one = six_stage(num_samples=5000, window=100, world_size=1, batch_size=1)
    _, seq = run(one, limit=7 * 32 + 5)
    c = six_stage(num_samples=5000, window=100, world_size=1, batch_size=5)
    _, nxt = c.next(c.restore(data))
    assert nxt[0].refs.triples() == [t for r in seq[7 * 32 :] for t in r.refs.triples()]


def test_format_version_refused(monkeypatch):
    import fpipe.core.snapshot as snap

    p = six_stage(num_samples=5000, window=100)
    data = p.snapshot(p.init())
    monkeypatch.setattr(snap, "FORMAT_VERSION", 99)
    with pytest.raises(SnapshotError, match="format version"):
        p.restore(data)


def test_six_stage_state_is_small_and_constant():
    """At most 1 KB, same size at step 10 and 1e6, and for windows 100 and 100,000."""
    sizes = {}
    # batch size 2 keeps 10^6 steps (2 * 10^6 refs) fast to reach; sizes do not depend on it.
    # Window 100 means 20,000 shuffle blocks per 10^6 steps (6 s of CPU), so it is taken to
    # 10^5 steps: its positions are then past 2^16 too, the widest msgpack integer below 2^32.
    for window, far in ((100, 100_000), (10_000, 1_000_000), (100_000, 1_000_000)):
        p = six_stage(num_samples=1_000_000, window=window, batch_size=2)
        sizes[(window, 10)] = len(p.snapshot(_advanced(p, 10)))
        sizes[(window, far)] = len(p.snapshot(fast_forward(p, far)))
    assert len(set(sizes.values())) == 1, sizes
    assert max(sizes.values()) <= 1024, sizes


def test_fast_forward_matches():
    p = six_stage(num_samples=20_000, window=1000)
    for steps in (3, 250):
        assert fast_forward(p, steps) == _advanced(p, steps)


def test_read_envelope_without_the_pipeline():
    """The one reader of the envelope: what decode_state checks and `fpipe state show` prints."""
    from fpipe.core.snapshot import FORMAT_VERSION, ORDER_VERSION, read_envelope, unpack_parts

    p = six_stage(num_samples=5000, window=100)
    state = _advanced(p)
    data = p.snapshot(state)
    env = read_envelope(data)
    assert (env.format_version, env.order_version) == (FORMAT_VERSION, ORDER_VERSION)
    assert env.fingerprint == p.fingerprint and env.checksum_ok and env.size == len(data)
    assert [part[0] for part in unpack_parts(env.parts)] == [n for n, _ in p.parts]
    assert unpack(env.payload) == msgspec.to_builtins(state)

    corrupted = data[:-1] + bytes([data[-1] ^ 1])
    with pytest.raises(SnapshotError, match="checksum does not match"):
        read_envelope(corrupted)
    shown = read_envelope(corrupted, verify=False)  # what is left of it, flagged
    assert not shown.checksum_ok and shown.payload == env.payload
    for junk, message in [(b"short", "truncated"), ("str", "is bytes")]:
        with pytest.raises(SnapshotError, match=message):
            read_envelope(junk, verify=False)
