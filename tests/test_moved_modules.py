"""Former module paths that the docs once named still import, as the module that now holds
their names (the same objects), with a DeprecationWarning naming the new path."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from fpipe._moved import MOVED

ROOT = Path(__file__).resolve().parent.parent


def test_every_former_path_imports_as_the_module_it_moved_to():
    """In a fresh interpreter (the aliases are looked up on first import)."""
    for old in MOVED:
        assert not (ROOT / (old.replace(".", "/") + ".py")).exists()  # really moved
    code = (
        "import warnings, importlib\n"
        "from fpipe._moved import MOVED\n"
        "for old, new in MOVED.items():\n"
        "    with warnings.catch_warnings(record=True) as w:\n"
        "        warnings.simplefilter('always')\n"
        "        got = importlib.import_module(old)\n"
        "    assert got is importlib.import_module(new), (old, got)\n"
        "    warned = [x for x in w if x.category is DeprecationWarning]\n"
        "    assert any(new in str(x.message) for x in warned), old\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_pack_algorithms_names_are_the_packing_ones():
    with warnings.catch_warnings():  # warned on first import (checked above, fresh process)
        warnings.simplefilter("ignore", DeprecationWarning)
        old = importlib.import_module("fpipe.plan.pack_algorithms")
    from fpipe.plan.packing import algorithms

    assert old.ffd is algorithms.ffd and old.ALGORITHMS is algorithms.ALGORITHMS


def test_an_unknown_former_path_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("fpipe.plan.no_such_module")
