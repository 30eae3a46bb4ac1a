"""The one lazy-export helper behind the packages' names that load on first use."""

import importlib
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
    mod = importlib.import_module(module)
    assert set(mod.__all__) - {"__version__"} <= set(dir(mod))
    with pytest.raises(AttributeError, match=f"module '{module}' has no attribute 'nope'"):
        _ = mod.nope


@pytest.fixture
def tmp_package(tmp_path, monkeypatch):
    """A package on sys.path whose __init__ uses lazy_exports, with a plain and a broken
    submodule; removed from sys.modules afterwards."""
    pkg = tmp_path / "fpipe_lazy_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "from fpipe._lazy import lazy_exports\n__getattr__, __dir__ = lazy_exports(__name__, {})\n"
    )
    (pkg / "child.py").write_text("VALUE = 1\n")
    (pkg / "broken.py").write_text("import fpipe_no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module(pkg.name)
    for name in [n for n in sys.modules if n.split(".")[0] == pkg.name]:
        del sys.modules[name]


def test_a_submodule_loads_on_first_use(tmp_package):
    # `import fpipe` then `fpipe.encode.X`: a package's submodules are attributes on first use,
    # whether or not its __init__ imported them.
    assert "fpipe_lazy_pkg.child" not in sys.modules
    assert tmp_package.child.VALUE == 1
    assert sys.modules["fpipe_lazy_pkg.child"] is tmp_package.child
    with pytest.raises(AttributeError, match="module 'fpipe_lazy_pkg' has no attribute 'nope'"):
        _ = tmp_package.nope
    assert not hasattr(tmp_package, "__wrapped__")  # dunder probes import nothing
    # a submodule that exists but cannot import says why, not "no attribute"
    with pytest.raises(ModuleNotFoundError, match="fpipe_no_such_dependency"):
        _ = tmp_package.broken
