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
import json
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


#: What each test below imports, in the order one fresh interpreter imports them: each stage's
#: modules are those of its import and of the stages before it (a superset of a fresh
#: interpreter's for that import alone, by modules the earlier stages were checked for).
_STAGES = {
    "fpipe.core": "import fpipe.core",  # (imports the fpipe package first)
    "fpipe": "import fpipe\nfpipe.__version__",
    "fpipe.core.testing": "import fpipe.core.testing",
    "fpipe.plan": "import fpipe.plan",
}


@pytest.fixture(scope="module")
def fresh_modules() -> dict[str, set[str]]:
    """The modules loaded after each stage of :data:`_STAGES`, in one fresh interpreter (this
    one has imported everything; one interpreter for the four checks instead of four)."""
    code = "import json, sys\nseen = {}\n"
    for stage, imports in _STAGES.items():
        code += f"{imports}\nseen[{stage!r}] = sorted(sys.modules)\n"
    code += "print(json.dumps(seen))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return {stage: set(names) for stage, names in json.loads(out).items()}


def _top_level(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


@pytest.mark.parametrize("module", ["fpipe.core", "fpipe.plan"])
def test_core_and_plan_import_no_heavy_dependencies(module, fresh_modules):
    loaded = _top_level(fresh_modules[module])
    assert module in fresh_modules[module]
    heavy = sorted(loaded & {"torch", "PIL", "av"})
    assert not heavy, f"import {module} pulled in {heavy}; keep core and plan free of them"


def test_core_imports_nothing_from_other_fpipe_packages(fresh_modules):
    others = sorted(
        m
        for m in fresh_modules["fpipe.core.testing"]  # import fpipe.core, fpipe.core.testing
        # the facade's own modules (_lazy, _moved, _version) import no fpipe package
        if m.startswith("fpipe.") and m.split(".")[1] not in ("core", "_lazy", "_moved", "_version")
    )
    assert not others, f"fpipe.core imported {others}; core must not depend on other packages"


def test_import_fpipe_stays_light(fresh_modules):
    loaded = _top_level(fresh_modules["fpipe"])
    assert "fpipe" in loaded
    assert "torch" not in loaded, "import fpipe pulled in torch; keep torch-facing names lazy"


def test_version_console_script(capsys):
    # the command's own code, in this process: tests/cli/test_cli_help.py runs `python -m fpipe`
    # and `python -m fpipe.cli.main` in new processes, and CI runs `fpipe --version`
    from fpipe.cli.main import main

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code in (0, None)
    assert capsys.readouterr().out.strip() == f"fpipe {fpipe.__version__}"


@pytest.mark.parametrize("name", [m for p in DOCTEST_PACKAGES for m in _module_names(p)])
def test_doctests(name):
    mod = _module(name)
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS, verbose=False, report=True)
    assert result.failed == 0, f"{result.failed} of {result.attempted} doctest(s) failed in {name}"
