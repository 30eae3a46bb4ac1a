"""Ray actor workers against process workers, on the image set and decode of bench/loader.py.

    PYTHONPATH=$PWD python bench/ray_workers.py [--quick]

Rows (batch 32 of 128-512 px JPEGs, 224 px reduced-scale decode, as ``fpipe nw=2`` in
bench/loader.py), medians of ``--repeats`` interleaved runs:

- ``processes2``: ``get_loader(num_workers=2)``, torch worker processes;
- ``ray2``: ``get_loader(num_workers=2, worker_mode="ray")`` on a local Ray instance of 2 CPUs
  (the same machine: what Ray adds, not what more nodes give).

``ray_rank_cpu_ms_per_batch`` is the CPU time this process (every thread, Ray's included)
spends per batch taken from the ``ray2`` loader (``processes_rank_cpu_ms_per_batch``: from the
``processes2`` one), planning included.

Then, with one actor and nothing else running, recipe by recipe, the round trip seen by this
process (send the recipe, materialize, hand the result over, deserialize it) minus the time
materializing took inside the actor: the median is ``ray_batch_overhead_ms``, what Ray adds per
batch from an actor on this node (the batch in a shared-memory slot, ``slots`` in the
breakdown), and ``ray_batch_overhead_store_ms`` the same through the object store, as from an
actor on another node; ``ray_bytes_per_batch`` is the serialized size of a result as Ray stores
it (plus the recipe sent). ``ray_breakdown`` splits the object store's cost
(bench/_ray_transport.py) for the loader's way of sending tensors (``fpipe``: out of band, read
where they lie in the object store) and Ray's default (``torch``: each storage pickled by
``torch.save``); each row's ``rank_cpu_ms`` is this process's CPU time per batch of that loop
(call and get); ``ray_rank_cost_by_batch_mb``
gives this process's cost per batch of 1, 5 and 20 MB sent the loader's way. Last, a
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
from _ray_transport import TransportActor, call_ms, costs, rank_cost  # noqa: E402

import fpipe  # noqa: E402
from fpipe.decode.image import ImageDecodeOptions  # noqa: E402
from fpipe.encode import batch_slots  # noqa: E402
from fpipe.loader import _ray_pool, _ray_workers  # noqa: E402
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


def overhead(ray, root: Path, n: int) -> tuple[float, float, int, int, dict]:
    """(median ms materializing inside the actor, median ms of the round trip seen here, result
    bytes, recipe bytes, the breakdown): one actor, one recipe at a time. The difference is
    what Ray adds per batch: sending the recipe, storing the result, fetching and
    deserializing it here. The breakdown (see bench/_ray_transport.py) compares the loader's
    way of sending tensors with Ray's default (torch pickling)."""
    ds = loader(root, 0).dataset
    state, recipes = ds.plan.init(), []
    for _ in range(n + 2):
        state, recipe, _ = next_recipe(ds.plan, state, ())
        recipes.append(encode_recipe(recipe))
    shipped = [ray.put(ds.materializer)]
    here = ray.get_runtime_context().get_node_id()
    breakdown, added = {}, {}
    for way in ("torch", "fpipe", "slots"):
        # the loader's actor options
        options = dict(_ray_pool.DEFAULT_ACTOR_OPTIONS, num_cpus=1)
        actor = ray.remote(TransportActor).options(**options).remote(way != "torch")
        ray.get(actor.where.remote())
        # ``slots``: as the loader sends batches from an actor on its node; else through the
        # object store, as from an actor on another node
        slots = (batch_slots.new_config(4), here, 0) if way == "slots" else None
        inside, round_trip, cpu, in_slot = [], [], [], 0
        for task in recipes:
            c0, t0 = time.process_time(), time.perf_counter()
            got, seconds = ray.get(actor.timed.remote(shipped, task, slots))
            round_trip.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            inside.append(seconds)
            in_slot += _in_slot(got.batch.image)
            if way == "fpipe":
                result = got
        # the first two open the dataset
        added[way] = statistics.median(r - i for r, i in zip(round_trip[2:], inside[2:])) * 1e3
        if way == "slots":
            row = {"batches_in_slots": in_slot, "batches": len(recipes)}
            del got
            batch_slots.detach(slots[0])
        else:
            row = costs(ray, actor, shipped, recipes[-1], n, way == "fpipe")
            row["call_ms"] = call_ms(ray, actor, recipes[0], n)
        row["rank_cpu_ms"] = round(statistics.median(cpu[2:]) * 1e3, 2)
        row["added_ms"] = round(added[way], 2)
        breakdown[way] = row
        if way == "fpipe":
            breakdown["rank_cost_by_batch_mb"] = {
                mb: rank_cost(ray, actor, mb * 10**6, n) for mb in (1, 5, 20)
            }
        ray.kill(actor)
    try:  # what Ray stores: its serializer, out-of-band buffers included
        ctx = ray._private.worker.global_worker.get_serialization_context()
        size = ctx.serialize(result).total_bytes
    except Exception:  # noqa: BLE001 - a private API: pickle's size is close
        import pickle

        size = len(pickle.dumps(result, protocol=5))
    return (
        statistics.median(inside[2:]) * 1e3,
        added["slots"],
        size,
        statistics.median(len(t) for t in recipes),
        breakdown,
    )


def _in_slot(t) -> bool:
    """Whether tensor ``t`` lies in a shared-memory slot mapped here."""
    arenas = batch_slots._attached.values()
    return any(a.base <= t.data_ptr() < a.base + len(a.mm) for a in arenas)


def rank_cpu_ms(root: Path, mode: str, n: int) -> float:
    """CPU time of this process (every thread: Ray's included) per batch taken from a loader
    of 2 workers of ``mode``, after 6 batches of warm-up."""
    opts = {"num_cpus": 1} if mode == "ray" else None
    it = iter(loader(root, 2, mode, opts))
    try:
        for _ in range(6):
            next(it)
        c0 = time.process_time()
        for _ in range(n):
            next(it)
        return (time.process_time() - c0) * 1e3 / n
    finally:
        it.close()


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
    # the actors of the breakdown import bench/_ray_transport.py: they inherit this environment
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
        + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    ray.init(num_cpus=2, object_store_memory=STORE_BYTES, log_to_driver=False)
    try:

        def run(mode):
            opts = {"num_cpus": 1} if mode == "ray" else None
            return in_process(lambda: iter(loader(root, 2, mode, opts)), "images", BATCH, 6)

        rows = {"processes2": run("process"), "ray2": run("ray")}
        wall, _ = measure(rows, args.batches, args.repeats, lambda m: print(m, flush=True))
        cpu_ms = {mode: rank_cpu_ms(root, mode, args.batches) for mode in ("process", "ray")}
        _ray_workers.release_ray_actors()
        inside_ms, added_ms, size, recipe, breakdown = overhead(ray, root, args.overhead_batches)
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
        "ray_batch_overhead_store_ms": breakdown["fpipe"]["added_ms"],
        "ray_rank_cpu_ms_per_batch": round(cpu_ms["ray"], 2),
        "processes_rank_cpu_ms_per_batch": round(cpu_ms["process"], 2),
        "ray_bytes_per_batch": int(size),
        "recipe_bytes_per_batch": int(recipe),
        "ray2_nodes_identical": identical,
        "ray2_nodes_used": nodes,
        "batches_compared": args.batches,
        "ray_rank_cost_by_batch_mb": breakdown.pop("rank_cost_by_batch_mb"),
        "ray_breakdown": breakdown,
        "loadavg_start": round(load_start, 1),
        "loadavg_end": round(os.getloadavg()[0], 1),
    }
    import json

    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
