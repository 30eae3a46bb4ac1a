"""``Key`` is a ``typing.NewType``: a type of its own for the checker, a plain int at run time."""

from fpipe.core.rng import Key, fold_in, key, split


def test_keys_are_plain_ints_at_run_time():
    k = key(1234)
    assert type(k) is int
    assert type(fold_in(k, 1, 2)) is int
    assert all(type(s) is int for s in split(k, 3))
    assert Key(5) == 5 and type(Key(5)) is int


def test_fold_in_of_nothing_is_the_key_itself():
    k = key(7)
    assert fold_in(k) is k
