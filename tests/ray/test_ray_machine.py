"""The loader state machine (property_tests/test_loader_machine.py) with Ray actor workers.

The machine's rules pick worker processes and threads; Ray needs a cluster, which the default
test run does not start, so its worker mode runs here (``-m integration``): fixed sequences of
the machine's own rules that start, restore, seek and replay on ``worker_mode="ray"``, with
every invariant of the machine checked after each rule (the stream equals the reference
stream for the weights asked, the state is small and the same on every rank, the shares follow
the weights asked).
"""

from __future__ import annotations

import pytest

from property_tests.test_loader_machine import (  # noqa: F401 - `data` is a fixture
    Config,
    LoaderMachine,
    Setup,
    data,
)

pytestmark = [pytest.mark.slow, pytest.mark.integration]

#: half a CPU per actor, spread: two actors fit the two one-CPU nodes of the test cluster
OPTIONS = {"num_cpus": 0.5, "scheduling_strategy": "SPREAD"}
RAY2 = Setup(1, 2, "ray")
RAY2_WORLD2 = Setup(2, 1, "ray")
THREADS = Setup(1, 2, "thread")


class RayMachine(LoaderMachine):
    """The machine, with the actor options of the test cluster for Ray setups."""

    def _open(self, setup: Setup, **kw) -> None:
        if setup.worker_mode == "ray":
            kw = {**kw, "ray_options": OPTIONS}
        super()._open(setup, **kw)


SEQUENCES = {
    # a checkpoint of a thread-worker run restored into Ray actors, with a change ahead
    "restore_into_ray_actors": [
        ("start", dict(cfg=Config("samples", 8, 0), setup=THREADS)),
        ("take", dict(k=3)),
        ("set_weights", dict(weights=(1.0, 0.0, 4.0), form="names", when="ahead", n=3, then=2)),
        ("save", {}),
        ("restore", dict(i=0, setup=RAY2, hist="own", then=4)),
    ],
    # a token blend on Ray actors: a change now, a seek back with the script's history, a
    # replay from the history on two ranks of Ray actors
    "seek_and_replay_on_ray_actors": [
        ("start", dict(cfg=Config("tokens", 12, 1), setup=RAY2)),
        ("take", dict(k=2)),
        ("set_weights", dict(weights=(0.3, 4.0, 1.0), form="list", when="now", n=0, then=3)),
        ("seek", dict(back=True, d=2, hist="mine", then=2)),
        ("skip_steps", dict(off=1, length=2, form="tuple", then=3)),
        ("save", {}),
        (
            "replay",
            dict(source="saved", how="then_seek", back=False, d=1, setup=RAY2_WORLD2, then=3),
        ),
    ],
}


@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_machine_rules_on_ray_actors(ray_cluster, request, name):
    machine = RayMachine(request.getfixturevalue("data"))
    try:
        for rule_name, kw in SEQUENCES[name]:
            getattr(machine, rule_name)(**kw)
            machine.stream_is_the_reference()
            machine.state_is_small_and_the_same_on_every_rank()
            machine.shares_follow_the_weights_asked()
        assert machine.stream, "the sequence took no batch"
        assert machine.setup.worker_mode == "ray"
    finally:
        machine.teardown()
