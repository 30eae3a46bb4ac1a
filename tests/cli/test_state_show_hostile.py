"""``fpipe state show`` on hostile snapshot files: a clean error (exit 2), never a traceback,
even when the checksum is valid and only the envelope's field types are wrong."""

import hashlib

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from fpipe.cli._state import run
from fpipe.cli.main import main
from fpipe.core.snapshot import MAGIC

_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=3),
    max_leaves=6,
)


def _checksummed(fields) -> bytes:
    body = msgspec.msgpack.encode(fields)
    return body + hashlib.blake2b(body, digest_size=8).digest()


def _show(tmp_path, data: bytes, capsys) -> tuple[int, str]:
    f = tmp_path / "snap.bin"
    f.write_bytes(data)
    code = main(["state", "show", str(f)])
    return code, capsys.readouterr().err


def test_wrong_field_types_are_a_clean_error(tmp_path, capsys):
    """A fingerprint of 2**40 (bytes(2**40) would allocate a terabyte), a part that is an int,
    a payload that is a string: each is refused with a message."""
    from tests.helpers import six_stage

    p = six_stage(num_samples=50, window=4, batch_size=2, slice_size=5)
    good = list(msgspec.msgpack.decode(p.snapshot(p.init())[:-8]))
    for i, bad in [(3, 2**40), (4, [5]), (5, "payload"), (1, "one"), (4, 7)]:
        fields = list(good)
        fields[i] = bad
        code, err = _show(tmp_path, _checksummed(fields), capsys)
        assert code == 2 and "not an fpipe snapshot" in err, (i, bad, err)
    code, _ = _show(tmp_path, _checksummed(good), capsys)
    assert code == 0


@settings(max_examples=50)
@given(fields=st.lists(_values, min_size=0, max_size=7), magic=st.booleans())
def test_any_checksummed_envelope_is_shown_or_refused(tmp_path_factory, fields, magic):
    import argparse
    import contextlib
    import io

    if magic and fields:
        fields[0] = MAGIC
    f = tmp_path_factory.getbasetemp() / "hostile-snap.bin"
    f.write_bytes(_checksummed(fields))
    out, err = io.StringIO(), io.StringIO()
    args = argparse.Namespace(action="show", file=str(f), config=None, json=False)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(args)  # raises nothing
    assert code in (0, 2)
    if code == 2 and not out.getvalue():
        assert err.getvalue().startswith("fpipe state: error:")
