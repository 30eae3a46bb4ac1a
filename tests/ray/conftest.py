"""One Ray instance for every Ray test: two simulated nodes (``ray.cluster_utils.Cluster``) of
one CPU each on this machine, started once per session (starting Ray takes about 10 s here).
The tests are skipped when Ray is not installed (``pip install "fpipe[ray]"``)."""

import os
from pathlib import Path

import pytest

ROOT = str(Path(__file__).resolve().parents[2])

#: Object store per node: small (tests move a few kB per batch), so /dev/shm is never short.
STORE_BYTES = 80 << 20


@pytest.fixture(scope="session")
def ray_cluster():
    """(ray module, the Cluster) with this process connected as its driver."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    # the nodes' workers import the tests' task encoders: they inherit this environment
    path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = ROOT + ("" if not path else os.pathsep + path)
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "object_store_memory": STORE_BYTES,
            "include_dashboard": False,
        },
    )
    cluster.add_node(num_cpus=1, object_store_memory=STORE_BYTES)
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        yield ray, cluster
    finally:
        from fpipe.loader._ray_workers import release_ray_actors

        release_ray_actors()
        ray.shutdown()
        cluster.shutdown()
        if path is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = path
