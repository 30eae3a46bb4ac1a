"""Ray actor workers against process workers, on the image set and decode of bench/loader.py.

    PYTHONPATH=$PWD python bench/ray_workers.py [--quick]

Rows (batch 32 of 128-512 px JPEGs, 224 px reduced-scale decode, as ``fpipe nw=2`` in
bench/loader.py), medians of ``--repeats`` interleaved runs:

- ``processes2``: ``get_loader(num_workers=2)``, torch worker processes;
- ``ray2``: ``get_loader(num_workers=2, worker_mode="ray")`` on a local Ray instance of 2 CPUs
  (the same machine: what Ray adds, not what more nodes give).

Then, with one actor and nothing else running, recipe by recipe, the round trip seen by this
process (send the recipe, materialize, store the result, fetch and deserialize it) minus the
time materializing took inside the actor: the median is ``ray_batch_overhead_ms``, what Ray adds
per batch; ``ray_bytes_per_batch`` is the
serialized size of a result as Ray stores it (plus the recipe sent). Last, a
``ray.cluster_utils.Cluster`` of two simulated nodes runs 2 actors spread over both and
``ray2_nodes_identical`` says whether its batches equal process mode's, bit for bit.

The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_line  # noqa: E402  (also puts the repo root on sys.path)
from _loader_data import ensure_image_set  # noqa: E402
from _loader_runs import in_process, measure  # noqa: E402

import fpipe  # noqa: E402
from fpipe.decode.image import ImageDecodeOptions  # noqa: E402
from fpipe.loader import _ray_workers  # noqa: E402
from fpipe.materialize.recipe_codec import encode_recipe  # noqa: E402
from fpipe.plan.skip import next_recipe  # noqa: E402

TARGET = 224
BATCH = 32
#: the shuffle of bench/loader.py
SHUFFLE, MAX_SEQ, SEED = 1000, 100, 1
DECODE = ImageDecodeOptions(target_size=TARGET)
STORE_BYTES = 200 << 20


def loader(root: Path, nw: int, mode: str = "process", ray_options=None):
    ds = fpipe.get_train_dataset(
        root,
        batch_size=BATCH,
        shuffle_buffer_size=SHUFFLE,
        max_samples_per_sequence=MAX_SEQ,
        seed=SEED,
        image_decode=DECODE,
    )
    return fpipe.get_loader(
        ds, num_workers=nw, prefetch_factor=2, worker_mode=mode, ray_options=ray_options
    )


def digests(ld, n: int) -> list[str]:
    import hashlib

    out = []
    for batch in ld:
        h = hashlib.sha256(batch.image.numpy().tobytes())
        h.update(repr(batch.__key__).encode())
        out.append(h.hexdigest())
        if len(out) == n:
            break
    return out


class TimedActor(_ray_workers.MaterializeActor):
    """The loader's actor, also saying how long materializing took inside it."""

    def timed(self, shipped: list, task) -> tuple:
        t0 = time.perf_counter()
        result = self.run(shipped, task)
        return result, time.perf_counter() - t0


def overhead(ray, root: Path, n: int) -> tuple[float, float, int, int]:
    """(median ms materializing inside the actor, median ms of the round trip seen here, result
    bytes, recipe bytes): one actor, one recipe at a time. The difference is what Ray adds per
    batch: sending the recipe, storing the result, fetching and deserializing it here."""
    ds = loader(root, 0).dataset
    state, recipes = ds.plan.init(), []
    for _ in range(n + 2):
        state, recipe, _ = next_recipe(ds.plan, state, ())
        recipes.append(encode_recipe(recipe))
    actor = ray.remote(TimedActor).options(num_cpus=1).remote()
    ray.get(actor.where.remote())
    shipped = [ray.put(ds.materializer)]
    inside, round_trip = [], []
    for task in recipes:
        t0 = time.perf_counter()
        result, seconds = ray.get(actor.timed.remote(shipped, task))
        round_trip.append(time.perf_counter() - t0)
        inside.append(seconds)
    ray.kill(actor)
    try:  # what Ray stores: its serializer, out-of-band buffers included
        ctx = ray._private.worker.global_worker.get_serialization_context()
        size = ctx.serialize(result).total_bytes
    except Exception:  # noqa: BLE001 - a private API: pickle's size is close
        import pickle

        size = len(pickle.dumps(result, protocol=5))
    # the first two open the dataset
    added = statistics.median(r - i for r, i in zip(round_trip[2:], inside[2:])) * 1e3
    return (
        statistics.median(inside[2:]) * 1e3,
        added,
        size,
        statistics.median(len(t) for t in recipes),
    )


def two_nodes(root: Path, n: int, reference: list[str]) -> tuple[bool, int]:
    """(batches equal process mode's, nodes the 2 actors ran on) on a two-node Cluster."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "object_store_memory": STORE_BYTES},
    )
    cluster.add_node(num_cpus=1, object_store_memory=STORE_BYTES)
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        ld = loader(root, 2, "ray", {"scheduling_strategy": "SPREAD"})
        it = iter(ld)
        got = digests_of_iter(it, n)
        nodes = {node for _, _, node in _ray_workers.actors_in_use()}
        it.close()
        _ray_workers.release_ray_actors()
    finally:
        ray.shutdown()
        cluster.shutdown()
    return got == reference, len(nodes)


def digests_of_iter(it, n: int) -> list[str]:
    class _Once:
        def __iter__(self):
            return it

    return digests(_Once(), n)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "fpipe-bench-loader"))
    ap.add_argument("--images", type=int, default=3200)
    ap.add_argument("--batches", type=int, default=30, help="timed batches per run")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--overhead-batches", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="small set, 1 repeat (smoke run)")
    args = ap.parse_args(argv)
    if args.quick:
        args.images, args.batches, args.repeats, args.overhead_batches = 640, 8, 1, 6
    import ray

    print(f"# fpipe Ray workers benchmark\n{machine_line()}", flush=True)
    load_start = os.getloadavg()[0]
    with contextlib.redirect_stdout(io.StringIO()):  # Energon's prepare prints progress
        ensure_image_set(
            Path(args.data) / "images",
            samples=args.images,
            shards=8,
            lo=128,
            hi=512,
            pool=min(args.images, 400),
        )
    root = Path(args.data) / "images"
    ray.init(num_cpus=2, object_store_memory=STORE_BYTES, log_to_driver=False)
    try:

        def run(mode):
            opts = {"num_cpus": 1} if mode == "ray" else None
            return in_process(lambda: iter(loader(root, 2, mode, opts)), "images", BATCH, 6)

        rows = {"processes2": run("process"), "ray2": run("ray")}
        wall, _ = measure(rows, args.batches, args.repeats, lambda m: print(m, flush=True))
        _ray_workers.release_ray_actors()
        inside_ms, added_ms, size, recipe = overhead(ray, root, args.overhead_batches)
    finally:
        ray.shutdown()
    reference = digests(loader(root, 2), args.batches)
    identical, nodes = two_nodes(root, args.batches, reference)
    result = {
        "processes2_samples_per_s": round(wall["processes2"], 1),
        "ray2_samples_per_s": round(wall["ray2"], 1),
        "ray2_vs_processes2": round(wall["ray2"] / wall["processes2"], 3),
        "materialize_ms_in_actor": round(inside_ms, 2),
        "ray_batch_overhead_ms": round(added_ms, 2),
        "ray_bytes_per_batch": int(size),
        "recipe_bytes_per_batch": int(recipe),
        "ray2_nodes_identical": identical,
        "ray2_nodes_used": nodes,
        "batches_compared": args.batches,
        "loadavg_start": round(load_start, 1),
        "loadavg_end": round(os.getloadavg()[0], 1),
    }
    import json

    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
