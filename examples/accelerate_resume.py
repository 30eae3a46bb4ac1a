"""Exact resume under Hugging Face accelerate: the fpipe loader held by
``accelerator.register_for_checkpointing``.

The scenario accelerate's own DataLoader gets wrong: 2 processes, 3 epochs of a shuffled
dataset (10 samples, batch 1 per process, say), interrupted after 2 batches of epoch 2, resumed
in new processes. With fpipe the resumed run delivers exactly the batches the uninterrupted run
would have::

    # train; save after 2 batches of epoch 2 and stop there (a "crash")
    accelerate launch --multi_gpu --num_processes 2 examples/accelerate_resume.py \
        --data DATASET --ckpt /tmp/ckpt --stop-after-save
    # new processes: resume from the checkpoint and finish epochs 2 and 3
    accelerate launch --multi_gpu --num_processes 2 examples/accelerate_resume.py \
        --data DATASET --ckpt /tmp/ckpt --resume

``--multi_gpu`` is accelerate's launcher of several processes on one machine, GPUs or not
(``Accelerator(cpu=True)`` below keeps them on the CPU); ``--cpu --num_processes 2`` would start
one process. (``torchrun --nproc_per_node 2 examples/accelerate_resume.py ...`` works too.)
DATASET is any prepared dataset (``fpipe prepare``); ``--record FILE`` writes each process's
batches as JSON (``{rank}`` in FILE is replaced by the process index).

After ``--resume`` each process prints a verdict: it replays the uninterrupted run with a fresh
loader (the data is read twice) and says whether the resumed batches equal that run's batches
after the save, or at which step they first differ (and then exits with status 1).
"""

from __future__ import annotations

import argparse
import json

import fpipe
from fpipe.loader import Topology


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="a prepared dataset folder")
    parser.add_argument("--ckpt", required=True, help="accelerate checkpoint folder")
    parser.add_argument("--resume", action="store_true", help="load --ckpt and continue")
    parser.add_argument("--stop-after-save", action="store_true", help="stop at the save")
    parser.add_argument("--record", help="write this process's batches here as JSON")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--global-batch-size", type=int, default=6)
    args = parser.parse_args()

    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    # fpipe distributes by itself: tell it the rank and world size; do NOT pass the loader to
    # accelerator.prepare() (that would shard the already-sharded batches again).
    topology = Topology(rank=accelerator.process_index, world_size=accelerator.num_processes)
    ds = fpipe.get_train_dataset(
        args.data,
        global_batch_size=args.global_batch_size,
        shuffle_buffer_size=8,
        max_samples_per_sequence=4,
        seed=42,
        num_epochs=args.epochs,
        topology=topology,
    )
    loader = fpipe.get_loader(ds)
    # The loader has state_dict() / load_state_dict(): accelerate saves and restores it with
    # the model and optimizer (custom_checkpoint_0.pkl; every process calls state_dict(), which
    # checks that the ranks agree; the main process writes the file).
    accelerator.register_for_checkpointing(loader)
    if args.resume:
        accelerator.load_state(args.ckpt)

    save = None if args.resume else (lambda: accelerator.save_state(args.ckpt))
    record, _ = train(loader, save=save, stop_after_save=args.stop_after_save)
    accelerator.wait_for_everyone()
    if args.record:
        with open(args.record.replace("{rank}", str(accelerator.process_index)), "w") as f:
            json.dump(record, f)
    rank = accelerator.process_index
    same = True
    if args.resume:  # the uninterrupted run, replayed: what the resumed run should deliver
        full, saved_after = train(fpipe.get_loader(ds))
        if saved_after < 0:
            same, text = False, "the uninterrupted run never reaches the save point (epoch 2)"
        else:
            same, text = verdict(record, full[saved_after:], saved_after)
        print(f"process {rank}: {text}", flush=True)
    else:
        print(f"process {rank}: {len(record)} batches", flush=True)
    accelerator.end_training()
    if not same:
        raise SystemExit(1)


def train(loader, *, save=None, stop_after_save: bool = False) -> tuple[list[dict], int]:
    """The training loop: each batch's record (global epoch, position, sample keys), and the
    number of batches before the save point, 2 batches into epoch 2, where ``save()`` is
    called (then the loop stops if ``stop_after_save``)."""
    record: list[dict] = []
    in_epoch, last_epoch, saved_after = 0, None, -1
    for batch in loader:
        # The global epoch (0-based) at the consumer: the same on every process at every step,
        # so every process decides to save at the same step. (A batch's own samples may still
        # belong to the previous epoch while the shuffle window spans the epoch boundary.)
        stats = loader.stats()
        epoch = stats.epoch
        in_epoch = in_epoch + 1 if epoch == last_epoch else 1
        last_epoch = epoch
        record.append({"epoch": epoch, "position": stats.position, "keys": list(batch.__key__)})
        # ... forward, backward, optimizer step ...
        if saved_after < 0 and epoch == 1 and in_epoch == 2:  # 2 batches into epoch 2
            saved_after = len(record)
            if save is not None:
                save()
                if stop_after_save:
                    break
    return record, saved_after


def verdict(resumed: list[dict], expected: list[dict], saved_after: int) -> tuple[bool, str]:
    """Whether the batches after the restore equal the uninterrupted run's after the save, and
    a line saying so, or naming the first step (1-based, of the whole run) that differs."""
    for i, (got, want) in enumerate(zip(resumed, expected)):
        if got != want:
            return False, (
                f"the resumed stream differs from the uninterrupted one at step "
                f"{saved_after + i + 1}: {got} instead of {want}"
            )
    if len(resumed) != len(expected):
        return False, (
            f"the resumed stream differs from the uninterrupted one: {len(resumed)} batches "
            f"after the restore, {len(expected)} in the uninterrupted run after step {saved_after}"
        )
    return True, (
        f"the resumed stream equals the uninterrupted one ({len(resumed)} batches after step "
        f"{saved_after})"
    )


if __name__ == "__main__":
    main()
