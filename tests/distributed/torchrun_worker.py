"""Run under ``torchrun`` by test_torchrun.py (gloo backend on CPU); one JSON file per rank.

    python -m torch.distributed.run --nproc_per_node=2 tests/distributed/torchrun_worker.py \
        run DATASET OUT --save-at K
    python -m torch.distributed.run --nproc_per_node=3 tests/distributed/torchrun_worker.py \
        resume DATASET OUT --state OUT/state.pt

``run``: 3 epochs of a shuffled dataset (global batch 6); after K batches every rank calls
``state_dict()`` (consistency check on) and rank 0 alone saves it; every rank also writes its
own state bytes. Then a per-rank-mode epoch, and a deliberate disagreement that the consistency
check must catch. ``resume``: new processes load rank 0's file and run to the end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import fpipe  # noqa: E402
from fpipe.loader import Topology  # noqa: E402
from fpipe.loader.consistency import ConsistencyError  # noqa: E402
from tests.distributed.helpers import batch_epoch, batch_keys, build_dataset  # noqa: E402

NUM_EPOCHS = 3


def _loader(path, topo, **kwargs):
    pd = build_dataset(path, rank=topo.rank, world_size=topo.world_size, **kwargs)
    return fpipe.get_loader(pd)


def _record(batch) -> dict:
    return {"keys": batch_keys(batch), "epoch": batch_epoch(batch)}


def run(args, topo, out: Path) -> dict:
    result: dict = {"rank": topo.rank, "world_size": topo.world_size}
    loader = _loader(args.dataset, topo, num_epochs=NUM_EPOCHS)
    assert loader.check_consistency is None  # auto: on, since torch.distributed is initialized
    batches = []
    if args.save_at == 0:
        sd = loader.state_dict()
    for batch in loader:
        batches.append(_record(batch))
        if len(batches) == args.save_at:
            sd = loader.state_dict()  # a collective: every rank calls it
            (out / f"state_rank{topo.rank}.bin").write_bytes(sd["fpipe_snapshot"])
            if topo.rank == 0:
                torch.save(sd, out / "state.pt")  # rank 0 alone saves the shared state
    result["batches"] = batches

    # per-rank mode: one epoch, each rank its own part
    per_rank = _loader(
        args.dataset, topo, num_epochs=1, distribution="per_rank", batch_size=3, drop_last=False
    )
    result["per_rank"] = [batch_keys(b) for b in per_rank]
    per_rank.state_dict()  # ranks at the same step: passes

    # tensor-parallel peers: both processes form one data-parallel rank (a DP group each of
    # size 1), so both must get the stream of a single-rank run
    groups = [dist.new_group([r]) for r in range(topo.world_size)]  # collective: all ranks
    replica = Topology(data_parallel_group=groups[topo.rank])
    result["replica_topology"] = [replica.rank, replica.world_size]
    rl = _loader(args.dataset, replica, num_epochs=1)
    result["replica"] = [batch_keys(b) for b in rl]
    rl.state_dict()

    # a rank that took one batch more than the others must be caught at save time
    skewed = _loader(args.dataset, topo, num_epochs=1)
    it = iter(skewed)
    for _ in range(2 + (topo.rank == 1)):
        next(it)
    try:
        skewed.state_dict()
        result["mismatch"] = None
    except ConsistencyError as e:
        result["mismatch"] = str(e)
    result["set_weights"] = _set_weights(topo, out)
    return result


def _set_weights(topo, out: Path) -> dict:
    """Ranks asking for different blend weights are refused (on every rank, nothing changed);
    the same weights are applied."""
    if topo.rank == 0:
        for name in ("a", "b"):
            rows = [json.dumps({"text": f"{name} {i}"}) for i in range(20)]
            (out / f"{name}.jsonl").write_text("\n".join(rows) + "\n")
        blend = "".join(f"      - {{weight: 1, path: {n}.jsonl}}\n" for n in "ab")
        (out / "mix.yaml").write_text("splits:\n  train:\n    blend:\n" + blend)
    dist.barrier()
    ds = fpipe.get_train_dataset(
        str(out / "mix.yaml"), global_batch_size=4, seed=1, sample_type="TextSample",
        field_map={"text": "text"}, topology=topo,
    )  # fmt: skip
    loader = fpipe.get_loader(ds)
    before = loader.snapshot()
    got: dict = {}
    try:
        loader.set_weights([1, 1 + topo.rank])
        got["disagree"] = None
    except ConsistencyError as e:
        got["disagree"] = str(e)
    got["unchanged"] = loader.snapshot() == before
    loader.set_weights([1, 3])
    got["applied"] = loader.snapshot() != before
    return got


def resume(args, topo, out: Path) -> dict:
    loader = _loader(args.dataset, topo, num_epochs=NUM_EPOCHS)
    loader.load_state_dict(torch.load(args.state, weights_only=True))
    batches = [_record(b) for b in loader]
    loader.state_dict()  # still consistent at the end
    return {"rank": topo.rank, "world_size": topo.world_size, "batches": batches}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("run", "resume"))
    parser.add_argument("dataset")
    parser.add_argument("out")
    parser.add_argument("--save-at", type=int, default=10)
    parser.add_argument("--state")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    try:
        topo = Topology.from_env()
        assert topo.rank == int(os.environ["RANK"]) and topo.world_size == dist.get_world_size()
        out = Path(args.out)
        result = (run if args.mode == "run" else resume)(args, topo, out)
        (out / f"{args.mode}_rank{topo.rank}.json").write_text(json.dumps(result))
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
