"""``fpipe demo``: the whole story in one command.

Makes a small synthetic image-caption dataset in a temporary folder, prepares it, runs a toy
training loop, snapshots the loader, keeps going, then restores the snapshot in a *new process*
and shows side by side that the stream continued exactly.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``demo`` sub-command."""
    p = sub.add_parser("demo", help="make, prepare, load, snapshot and resume a small dataset")
    p.add_argument("--dir", help="work folder (default: a new temporary folder)")
    p.add_argument("--steps", type=int, default=12, help="training steps before the snapshot")
    p.add_argument("--after", type=int, default=6, help="steps compared after the snapshot")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    p.add_argument("--seed", type=int, default=1234)
    # Internal: the resumed process.
    p.add_argument("--resume-from", help=argparse.SUPPRESS)
    return p


def _loader(root: str, args, num_workers: int):
    import fpipe
    from fpipe.decode.image import ImageDecodeOptions

    ds = fpipe.get_train_dataset(
        root,
        batch_size=args.batch_size,
        shuffle_buffer_size=64,
        max_samples_per_sequence=8,
        seed=args.seed,
        image_decode=ImageDecodeOptions(target_size=64),
    )
    return fpipe.get_loader(ds, num_workers=num_workers)


def _summary(batch) -> dict:
    import hashlib

    digest = hashlib.sha256(batch.image.numpy().tobytes()).hexdigest()[:12]
    return {"first_key": batch.__key__[0], "pixels_sha256": digest}


def _resume(args) -> int:
    loader = _loader(args.dir, args, num_workers=0)  # other worker count: same stream
    loader.load_state_dict({"fpipe_snapshot": Path(args.resume_from).read_bytes()})
    it = iter(loader)
    print(json.dumps([_summary(next(it)) for _ in range(args.after)]))
    return 0


def run(args: argparse.Namespace) -> int:
    """Run the demo (or, with the hidden --resume-from, the resumed half of it)."""
    if args.resume_from:
        return _resume(args)
    from fpipe.storage import prepare_dataset
    from fpipe.storage.synthetic import write_image_caption_shards

    root = args.dir or tempfile.mkdtemp(prefix="fpipe-demo-")
    args.dir = root
    print(f"1. writing a synthetic image-caption dataset to {root}")
    write_image_caption_shards(root, num_shards=4, per_shard=48, seed=args.seed)
    print("2. preparing it (index + metadata, no payload decode)")
    report = prepare_dataset(
        root,
        fields={"image": "jpg", "caption": "txt"},
        sample_type="CaptioningSample",
        split="1,0,0",
        progress=sys.stderr.isatty(),
    )
    print(
        f"   {report.num_samples} samples in {report.num_shards} shards indexed in "
        f"{report.elapsed_s:.2f} s; columns: {', '.join(report.columns)}"
    )

    print(f"3. training for {args.steps} steps ({args.workers} workers, batch {args.batch_size})")
    loader = _loader(root, args, num_workers=args.workers)
    it = iter(loader)
    t0 = time.perf_counter()
    for step in range(args.steps):
        batch = next(it)
        loss = float(batch.image.float().mean()) / 255  # a toy "training step"
        bar = "#" * (step + 1) + "." * (args.steps - step - 1)
        print(f"\r   [{bar}] step {step + 1:3d} loss {loss:.4f}", end="", flush=True)
    print(f"  ({(time.perf_counter() - t0):.2f} s)")
    snap = Path(root) / "loader_state.bin"
    snap.write_bytes(loader.state_dict()["fpipe_snapshot"])
    stats = loader.stats()
    print(
        f"4. snapshot after step {args.steps}: {snap.stat().st_size} bytes "
        f"(epoch {stats.epoch}, {stats.samples} samples delivered)"
    )
    expected = [_summary(next(it)) for _ in range(args.after)]

    print("5. restoring the snapshot in a new process (0 workers) and continuing")
    cmd = [
        sys.executable,
        "-m",
        "fpipe.cli.main",
        "demo",
        "--dir",
        root,
        "--resume-from",
        str(snap),
        "--after",
        str(args.after),
        "--batch-size",
        str(args.batch_size),
        "--seed",
        str(args.seed),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        print(out.stderr, file=sys.stderr)
        return 1
    resumed = json.loads(out.stdout.strip().splitlines()[-1])

    print(f"\n   {'step':>4}  {'uninterrupted run':<36}  {'restored in a new process':<36}")
    same = True
    for i, (a, b) in enumerate(zip(expected, resumed)):
        ok = a == b
        same &= ok
        left = f"{a['first_key']} {a['pixels_sha256']}"
        right = f"{b['first_key']} {b['pixels_sha256']}"
        print(f"   {args.steps + i + 1:>4}  {left:<36}  {right:<36}  {'same' if ok else 'DIFF'}")
    same &= len(resumed) == len(expected)
    print("\nthe stream continued exactly" if same else "\nMISMATCH: the streams differ")
    return 0 if same else 1
