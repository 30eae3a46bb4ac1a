"""Hypothesis profiles shared by tests/ and property_tests/.

``ci`` (selected when CI is set, or HYPOTHESIS_PROFILE=ci) bounds examples so the suite stays
well under 15 minutes on 2 cores; ``dev`` is the default locally; ``long`` is for soak runs.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=100,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=200, deadline=None)
settings.register_profile("long", max_examples=1000, deadline=None)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
)
