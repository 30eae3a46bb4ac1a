"""Hypothesis profiles shared by tests/ and property_tests/.

The default profile (``ci``) is bounded and derandomized: the README's test command runs the
same examples everywhere, with or without ``CI`` set, and stays under 150 s on 2 cores (on
every core through pytest-xdist, see pyproject.toml).
Opt in to more with ``HYPOTHESIS_PROFILE=dev`` (200 random examples per property) or
``HYPOTHESIS_PROFILE=long`` (1000, for soak runs). Tests marked ``slow`` run in every profile;
deselect them while iterating with ``-m "not slow"``.
"""

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=100,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=200, deadline=None, print_blob=True)
settings.register_profile("long", max_examples=1000, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or "ci")


@pytest.fixture(scope="session")
def fresh_process():
    """One Python process, started once, that restores loaders from snapshot files (see
    tests/loader/fresh_process.py)."""
    from tests.loader.fresh_process import FreshProcess

    proc = FreshProcess()
    yield proc
    proc.close()
