"""The one walk from records to plain data, in its two forms."""

import msgspec

from fpipe.core.fingerprint import canonical, record_fields


class Inner(msgspec.Struct, frozen=True):
    x: int
    fn: object = None


class Outer(msgspec.Struct, frozen=True):
    inner: Inner
    items: tuple
    table: dict


VALUE = Outer(Inner(1, len), (Inner(2), 3), {1: Inner(4)})


def test_fingerprinted_form_is_type_then_fields():
    assert canonical(VALUE) == [
        "Outer",
        {
            "inner": ["Inner", {"x": 1, "fn": "builtins:len"}],
            "items": [["Inner", {"x": 2, "fn": None}], 3],
            "table": {"1": ["Inner", {"x": 4, "fn": None}]},
        },
    ]


def test_named_form_puts_the_type_among_the_fields():
    assert canonical(VALUE, named=True) == {
        "__type__": "Outer",
        "inner": {"__type__": "Inner", "x": 1, "fn": "builtins:len"},
        "items": [{"__type__": "Inner", "x": 2, "fn": None}, 3],
        "table": {"1": {"__type__": "Inner", "x": 4, "fn": None}},
    }


def test_record_fields_are_the_fields_of_either_form():
    assert record_fields(VALUE) == canonical(VALUE)[1]
    named = canonical(VALUE, named=True)
    assert record_fields(VALUE, named=True) == {k: v for k, v in named.items() if k != "__type__"}
