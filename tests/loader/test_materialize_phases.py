"""The context manager that names a failing task encoder hook, its sample keys and step."""

import pytest

from fpipe.core.errors import BadSampleError, MaterializeError
from fpipe.encode import SkipSample
from fpipe.materialize.materializer import naming_failures


def test_a_hooks_own_failure_names_hook_keys_step_and_position():
    with (
        pytest.raises(MaterializeError) as info,
        naming_failures("encode_sample", lambda: ("a/1",), 7, 2),
    ):
        raise ValueError("bad crop")
    err = info.value
    assert (err.hook, err.keys, err.step, err.position, err.original) == (
        "encode_sample",
        ("a/1",),
        7,
        2,
        "ValueError",
    )
    assert str(err) == (
        "encode_sample raised ValueError: bad crop (sample 'a/1'; step 7, position 2 in the batch)"
    )
    assert "bad crop" in err.traceback and isinstance(err.__cause__, ValueError)


def test_skips_and_fpipe_errors_pass_unchanged_and_keys_are_looked_up_on_failure_only():
    def keys():
        raise AssertionError("keys looked up without a failure")

    with naming_failures("batch", keys, 0):
        pass
    for raised in (SkipSample(), BadSampleError("p", "k", "bad")):
        with pytest.raises(type(raised)), naming_failures("batch", keys, 0):
            raise raised
