"""The public surface: sorted ``__all__``, docstrings, light imports, doctests, the console script.

* Every fpipe module that defines ``__all__`` keeps it sorted (dunder names such as
  ``__version__`` first, then code-point order), so additions land in one obvious place.
* Every class and function exported by the library packages (core, plan, decode, samples,
  storage) has a docstring of its own.
* ``import fpipe.core`` / ``import fpipe.plan`` pull in no torch, PIL or av, and ``import fpipe``
  no torch (checked in a fresh interpreter, since this one has imported everything).
* The examples in the docstrings of those packages run (``doctest``).
* ``fpipe --version`` works.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil
import subprocess
import sys

import pytest

import fpipe

DOCUMENTED_PACKAGES = ("fpipe.core", "fpipe.plan", "fpipe.decode", "fpipe.samples", "fpipe.storage")
DOCTEST_PACKAGES = DOCUMENTED_PACKAGES


def _module_names(package: str | None = None) -> list[str]:
    """Dotted names of a package and all its submodules (all of fpipe when ``package`` is None)."""
    pkg = importlib.import_module(package or "fpipe")
    names = [pkg.__name__]
    for info in pkgutil.walk_packages(pkg.__path__, prefix=pkg.__name__ + "."):
        names.append(info.name)
    return sorted(names)


def _module(name: str):
    # sys.modules, not the attribute: some modules are shadowed by a same-named function in their
    # package (fpipe.plan.batch is the function, fpipe.plan.batch the module is in sys.modules).
    importlib.import_module(name)
    return sys.modules[name]


def _all_sort_key(name: str) -> tuple[bool, str]:
    return (not (name.startswith("__") and name.endswith("__")), name)


def test_dunder_all_is_sorted():
    problems = []
    for name in _module_names():
        exported = getattr(_module(name), "__all__", None)
        if exported is None:
            continue
        exported = list(exported)
        if len(set(exported)) != len(exported):
            problems.append(f"{name}.__all__ has duplicates")
        expected = sorted(exported, key=_all_sort_key)
        if exported != expected:
            problems.append(f"{name}.__all__ is not sorted; expected {expected}")
        missing = [n for n in exported if not hasattr(_module(name), n)]
        if missing:
            problems.append(f"{name}.__all__ names {missing}, which the module does not define")
    assert not problems, "\n".join(problems)


def test_energon_hook_names_are_exported_at_top_level_and_by_encode():
    import fpipe.encode
    import fpipe.encode.hooks as hooks

    # using_sample_rng is the loader's side of sample_rng, not a user hook
    loaders = {"current_position", "using_position", "using_sample", "using_sample_rng"}
    user_hooks = set(hooks.__all__) - loaders
    assert user_hooks <= set(fpipe.encode.__all__)
    assert user_hooks | {"DefaultTaskEncoder", "TaskEncoder"} <= set(fpipe.__all__)
    for name in user_hooks:
        assert getattr(fpipe, name) is getattr(fpipe.encode, name) is getattr(hooks, name)


@pytest.mark.parametrize("name", [m for p in DOCUMENTED_PACKAGES for m in _module_names(p)])
def test_public_names_have_docstrings(name):
    mod = _module(name)
    assert (mod.__doc__ or "").strip(), f"module {name} has no docstring"
    undocumented = []
    for attr in getattr(mod, "__all__", ()):
        obj = getattr(mod, attr)
        if not (inspect.isclass(obj) or inspect.isfunction(obj) or inspect.isbuiltin(obj)):
            continue  # constants, type aliases of builtins, submodules
        if getattr(obj, "__module__", "").split(".")[0] != "fpipe":
            continue  # re-exported from elsewhere (e.g. Key = int)
        doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
        if not (doc or "").strip():
            undocumented.append(attr)
    assert not undocumented, f"{name}: exported without a docstring: {undocumented}"


def _fresh_modules(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys\nprint('\\n'.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {line.split(".")[0] for line in out.split()}


@pytest.mark.parametrize("module", ["fpipe.core", "fpipe.plan"])
def test_core_and_plan_import_no_heavy_dependencies(module):
    loaded = _fresh_modules(f"import {module}")
    assert module.split(".")[0] in loaded
    heavy = sorted(loaded & {"torch", "PIL", "av"})
    assert not heavy, f"import {module} pulled in {heavy}; keep core and plan free of them"


def test_core_imports_nothing_from_other_fpipe_packages():
    code = "import fpipe.core, fpipe.core.testing\nimport sys\nprint('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    others = sorted(
        m
        for m in out.stdout.split()
        # the facade's own modules (_lazy, _moved, _version) import no fpipe package
        if m.startswith("fpipe.") and m.split(".")[1] not in ("core", "_lazy", "_moved", "_version")
    )
    assert not others, f"fpipe.core imported {others}; core must not depend on other packages"


def test_import_fpipe_stays_light():
    loaded = _fresh_modules("import fpipe\nfpipe.__version__")
    assert "torch" not in loaded, "import fpipe pulled in torch; keep torch-facing names lazy"


def test_version_console_script():
    out = subprocess.run(
        [sys.executable, "-m", "fpipe.cli.main", "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == f"fpipe {fpipe.__version__}"


@pytest.mark.parametrize("name", [m for p in DOCTEST_PACKAGES for m in _module_names(p)])
def test_doctests(name):
    mod = _module(name)
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS, verbose=False, report=True)
    assert result.failed == 0, f"{result.failed} of {result.attempted} doctest(s) failed in {name}"
