"""The one lazy-export helper behind the packages' names that load on first use."""

import sys
import types

import pytest

from fpipe._lazy import lazy_exports


@pytest.fixture
def package(monkeypatch):
    mod = types.ModuleType("fpipe_lazy_probe")
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    mod.__getattr__, mod.__dir__ = lazy_exports(mod.__name__, {"sqrt": "math"})
    return mod


def test_a_name_loads_once_and_stays(package):
    import math

    assert package.sqrt is math.sqrt
    assert "sqrt" in vars(package)  # kept: the next lookup does not come back here
    assert "sqrt" in dir(package)


def test_an_unknown_name_is_the_usual_attribute_error(package):
    with pytest.raises(AttributeError, match="module 'fpipe_lazy_probe' has no attribute 'nope'"):
        _ = package.nope


@pytest.mark.parametrize(
    "module", ["fpipe", "fpipe.decode", "fpipe.encode", "fpipe.loader", "fpipe.datasets"]
)
def test_fpipe_packages_list_their_lazy_names(module):
    import importlib

    mod = importlib.import_module(module)
    assert set(mod.__all__) - {"__version__"} <= set(dir(mod))
    with pytest.raises(AttributeError, match=f"module '{module}' has no attribute 'nope'"):
        _ = mod.nope
