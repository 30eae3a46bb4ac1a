"""``fpipe demo``: the whole story in one command.

Makes a small synthetic image-caption dataset in a temporary folder, prepares it, shows one
batch (fields, shapes, dtypes, a caption) and a preview picture, runs a toy training loop,
snapshots the loader, keeps going, then restores the snapshot in a *new process* and shows side
by side that the stream continued exactly. The data is removed at the end unless ``--keep``;
the preview picture stays in the run's own temporary folder (or where ``--preview`` says).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "preview_path", "run"]

DESCRIPTION = """\
Make a small synthetic image-caption dataset (192 samples), prepare it, show one batch and a
preview picture, train a toy loop, snapshot the loader, then restore the snapshot in a new
process and compare the batches that follow with the uninterrupted run.
"""


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``demo`` sub-command."""
    p = sub.add_parser(
        "demo",
        help="make, prepare, show, load, snapshot and resume a small dataset",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--keep", metavar="DIR", help="write the data to DIR and keep it")
    p.add_argument("--steps", type=int, default=12, help="training steps before the snapshot")
    p.add_argument("--after", type=int, default=6, help="steps compared after the snapshot")
    p.add_argument("--batch-size", type=int, default=8, help="samples per batch (default 8)")
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers (default 2)")
    p.add_argument("--seed", type=int, default=1234, help="shuffle seed")
    p.add_argument(
        "--preview",
        metavar="PNG",
        help="where to write the preview picture (default: the --keep folder, else a new "
        "folder of this run's own under the system's temporary folder, kept after the data is "
        "removed)",
    )
    # Internal: the resumed process.
    p.add_argument("--resume-from", help=argparse.SUPPRESS)
    p.add_argument("--dir", help=argparse.SUPPRESS)
    return p


def _loader(root: str, args: argparse.Namespace, num_workers: int):
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


def _summary(batch) -> dict[str, str]:
    digest = hashlib.sha256(batch.image.numpy().tobytes()).hexdigest()[:12]
    return {"first_key": batch.__key__[0], "pixels_sha256": digest}


def _resume(args: argparse.Namespace) -> int:
    loader = _loader(args.dir, args, num_workers=0)  # other worker count: same stream
    loader.load_state_dict({"fpipe_snapshot": Path(args.resume_from).read_bytes()})
    it = iter(loader)
    print(json.dumps([_summary(next(it)) for _ in range(args.after)]))
    return 0


def _show_batch(batch: Any) -> None:
    from fpipe.samples.describe import describe_fields

    print(f"   {len(batch.__key__)} samples collated into one {type(batch).__name__}; its fields:")
    for name, text in describe_fields(batch):
        if name in ("__restore_key__", "__subflavors__"):
            continue
        print(f"     {name:<9} {text}")
    print(f"   first caption: {batch.caption[0]!r}")
    print("   (image: uint8 pixels [batch, channels, height, width], cropped to 64 x 64)")


def _train(it, first: int, last: int) -> None:
    """Toy training steps ``first..last``: a progress bar on a terminal, else a few lines."""
    from tqdm import tqdm

    tty = sys.stdout.isatty()
    bar = tqdm(total=last, initial=first - 1, unit="step", file=sys.stdout, disable=not tty)
    for step in range(first, last + 1):
        loss = float(next(it).image.float().mean()) / 255  # a toy "training step"
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.4f}")
        if not tty and step % max(1, last // 3) == 0:
            print(f"   step {step}/{last}  loss {loss:.4f}")
    bar.close()


def _compare(expected: list[dict], resumed: list[dict], first_step: int) -> bool:
    head = ("step", "first sample key", "pixels sha256", "first sample key", "pixels sha256")
    print(f"   {'':>4}  {'uninterrupted run':<35}  restored in a new process")
    print(f"   {head[0]:>4}  {head[1]:<20} {head[2]:<14}  {head[3]:<20} {head[4]:<14}  same?")
    same = len(resumed) == len(expected)
    for i, (a, b) in enumerate(zip(expected, resumed)):
        ok = a == b
        same &= ok
        print(
            f"   {first_step + i:>4}  {a['first_key']:<20} {a['pixels_sha256']:<14}  "
            f"{b['first_key']:<20} {b['pixels_sha256']:<14}  {'yes' if ok else 'NO'}"
        )
    return same


def run(args: argparse.Namespace) -> int:
    """Run the demo (or, with the hidden --resume-from, the resumed half of it)."""
    if args.resume_from:
        return _resume(args)
    if args.keep:
        return _demo(args, args.keep)
    # A folder of this run's own: the data (removed at the end) and the preview picture (kept,
    # unless --preview puts it elsewhere; then the folder goes too).
    out = Path(tempfile.mkdtemp(prefix="fpipe-demo-"))
    try:
        return _demo(args, str(out / "data"))
    finally:
        shutil.rmtree(out / "data", ignore_errors=True)
        if not any(out.iterdir()):
            out.rmdir()


def preview_path(args: argparse.Namespace, root: str | Path) -> Path:
    """Where the preview picture goes: ``--preview``, else in the ``--keep`` folder, else
    beside this run's data folder ``root`` (which is removed at the end)."""
    if args.preview:
        return Path(args.preview)
    if args.keep:
        return Path(root) / "fpipe-demo-preview.png"
    return Path(root).parent / "preview.png"


def _demo(args: argparse.Namespace, root: str) -> int:
    from fpipe.preview import save_preview
    from fpipe.storage import prepare_dataset
    from fpipe.storage.prepare.synthetic import write_image_caption_shards

    print(f"1. writing 4 WebDataset shards of 48 samples (jpg image, txt caption) to {root}")
    write_image_caption_shards(root, num_shards=4, per_shard=48, seed=args.seed)
    print("2. preparing them: an index of where each sample's files are, plus metadata")
    print("   columns (image width and height, caption length); no pixel is decoded")
    report = prepare_dataset(
        root,
        fields={"image": "jpg", "caption": "txt"},
        sample_type="CaptioningSample",
        split="1,0,0",
        progress=sys.stderr.isatty(),
    )
    print(
        f"   {report.num_samples} samples in {report.num_shards} shards, {report.elapsed_s:.2f} s"
    )
    png = save_preview(root, preview_path(args, root), n=16, cell_size=128)
    print(f"   preview of the first 16 samples: {png}")

    loader = _loader(root, args, num_workers=args.workers)
    it = iter(loader)
    print(f"3. one batch, as a training loop gets it (batch size {args.batch_size}):")
    _show_batch(next(it))
    print(f"4. training for {args.steps} steps ({args.workers} workers)")
    _train(it, 2, args.steps)  # step 1 was the batch shown above
    snap = Path(root) / "loader_state.bin"
    snap.write_bytes(loader.state_dict()["fpipe_snapshot"])
    stats = loader.stats()
    print(
        f"5. loader state after step {args.steps}: {snap.stat().st_size} bytes "
        f"(epoch {stats.epoch}, {stats.samples} samples delivered); the run goes on"
    )
    expected = [_summary(next(it)) for _ in range(args.after)]

    print("6. restoring that state in a new process (0 workers) and continuing:")
    cmd = [
        sys.executable, "-m", "fpipe.cli.main", "demo", "--dir", root,
        "--resume-from", str(snap), "--after", str(args.after),
        "--batch-size", str(args.batch_size), "--seed", str(args.seed),
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        print(out.stderr, file=sys.stderr)
        return 1
    resumed = json.loads(out.stdout.strip().splitlines()[-1])
    same = _compare(expected, resumed, args.steps + 1)
    print("the stream continued exactly" if same else "MISMATCH: the streams differ")
    if args.keep:
        print(f"data kept in {root}")
    return 0 if same else 1
