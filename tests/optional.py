"""Optional packages in tests: skipped when missing, imported only when used."""

import importlib.util

import pytest


def skip_unless_installed(*names: str) -> None:
    """Skip the calling test module when a package is not installed, without importing it:
    every test process collects every module, and a heavy optional package (moto: ~1 s)
    imported there is paid even where its tests run in another process."""
    for name in names:
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"{name} is not installed", allow_module_level=True)
