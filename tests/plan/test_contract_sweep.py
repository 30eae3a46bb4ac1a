"""The contract sweep: every public plan step (and every registered test step) passes the
contract checks; see contract_examples.py for the table and how to register a step."""

from __future__ import annotations

import inspect
import typing

import pytest

import fpipe.plan
from fpipe.core import Pipeline, Source, Stage, View
from fpipe.core.testing import assert_config_reaches_fingerprint, check_pipeline
from tests.plan.contract_examples import EXAMPLES, Example

STEP_KINDS = (View, Stage, Source)


def public_steps() -> list[str]:
    """Names in ``fpipe.plan.__all__`` that build a step (functions returning a step record)."""
    out = []
    for name in fpipe.plan.__all__:
        obj = getattr(fpipe.plan, name)
        if inspect.isclass(obj) or not callable(obj):
            continue
        ret = typing.get_type_hints(obj).get("return")
        assert ret is not None, f"fpipe.plan.{name}: annotate its return type"
        if ret in STEP_KINDS:
            out.append(name)
    return out


def test_every_public_step_has_an_example():
    steps = public_steps()
    assert {"batch", "repeat", "samples", "window_shuffle"} <= set(steps)
    missing = sorted(set(steps) - {e.factory for e in EXAMPLES})
    assert not missing, f"public plan steps without a contract example: {missing}"


def _ids(e: Example) -> str:
    return e.step


@pytest.mark.parametrize("example", EXAMPLES, ids=_ids)
def test_step_contract(example: Example):
    def make(**overrides):
        return Pipeline(example.build(**overrides), seed=11)

    check_pipeline(make, cut_points=example.cut_points, limit=example.limit)
    config = dict(make().parts).get(example.step)
    assert config is not None, f"{example.step!r} is not a step of the example plan"
    untested = sorted(set(config.__struct_fields__) - set(example.variants))
    assert not untested, f"{example.step}: config fields without a variant: {untested}"
    for field, overrides in example.variants.items():
        assert_config_reaches_fingerprint(make, lambda o=overrides: make(**o), example.step, field)
