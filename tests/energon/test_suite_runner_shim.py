"""The Energon suite runner's torchvision shim (tests/energon/suite_runner.py): a torchvision
whose C operators are absent imports (its transforms usable), and where torchvision is not
installed the runner says so instead of failing. A stand-in package plays torchvision, so no
torchvision is needed."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from tests.energon.suite_runner import torchvision_status, write_shim

_FAILS_WITHOUT_C_OPS = 'raise RuntimeError("operator torchvision::nms does not exist")\n'


def _fake_torchvision(root: Path) -> None:
    """A package laid out as a CUDA torchvision wheel on a CPU-only torch behaves: its two
    registration modules fail at import, its transforms are plain Python."""
    package = root / "torchvision"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from torchvision import _autograd_registrations, _meta_registrations, transforms\n"
        "__version__ = '0.0+fake'\n"
    )
    (package / "_meta_registrations.py").write_text(_FAILS_WITHOUT_C_OPS)
    (package / "_autograd_registrations.py").write_text(_FAILS_WITHOUT_C_OPS)
    (package / "transforms.py").write_text("def Identity(x):\n    return x\n")


def _env(*paths: Path) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in paths)}


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the shim asks torch")
def test_torchvision_without_c_operators_imports_through_the_shim(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _fake_torchvision(site)
    shim = write_shim(tmp_path)
    without = torchvision_status(sys.executable, _env(site), tmp_path)
    assert without.startswith("not importable (RuntimeError: operator torchvision::nms")
    status = torchvision_status(sys.executable, _env(shim, site), tmp_path)
    assert status.startswith("0.0+fake (C operators absent: their registrations skipped")


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is not None, reason="installed")
def test_runner_reports_torchvision_missing(tmp_path):
    shim = write_shim(tmp_path)
    status = torchvision_status(sys.executable, _env(shim), tmp_path)
    assert status == "not importable (ModuleNotFoundError: No module named 'torchvision')"
