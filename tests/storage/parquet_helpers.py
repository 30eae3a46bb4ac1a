"""Hub-layout Parquet datasets written at test time by the ``datasets`` library."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np


def image_bytes(i: int) -> bytes:
    """A small image, JPEG for even ``i`` and PNG for odd (sizes vary with ``i``)."""
    from PIL import Image

    arr = np.full((8 + i % 5, 10 + i % 3, 3), i % 251, np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG" if i % 2 else "JPEG")
    return buf.getvalue()


def write_hub_dataset(root: Path, *, train=(17, 17, 16), val=(12,), row_group=7) -> Path:
    """``root/data/{train,validation}-0000k-of-0000n.parquet`` as ``Dataset.to_parquet``
    writes them: an ``Image`` column (``{bytes, path}`` structs), ``text``, ``tokens``
    (int64) and ``score`` (float32), ``row_group`` rows per row group."""
    import datasets

    features = datasets.Features(
        {
            "image": datasets.Image(),
            "text": datasets.Value("string"),
            "tokens": datasets.Value("int64"),
            "score": datasets.Value("float32"),
        }
    )
    i = 0
    for split, sizes in (("train", train), ("validation", val)):
        for k, n in enumerate(sizes):
            rows = []
            for _ in range(n):
                rows.append(
                    {
                        "image": {"bytes": image_bytes(i), "path": None},
                        "text": f"{split} caption {i}",
                        "tokens": 3 + i % 7,
                        "score": i / 8,
                    }
                )
                i += 1
            out = root / "data" / f"{split}-{k:05d}-of-{len(sizes):05d}.parquet"
            out.parent.mkdir(parents=True, exist_ok=True)
            ds = datasets.Dataset.from_list(rows, features=features)
            ds.to_parquet(str(out), batch_size=row_group)
    return root


def write_saved_dataset(root: Path, *, train=(17, 17, 16), val=(12,), batch=7) -> Path:
    """``root`` as ``DatasetDict.save_to_disk`` writes it: ``dataset_dict.json``, then
    ``train/`` and ``validation/`` with ``state.json`` and Arrow stream files
    ``data-0000k-of-0000n.arrow`` of ``batch``-row record batches; the columns of
    :func:`write_hub_dataset`. ``train``/``val``: rows per file."""
    import datasets

    features = datasets.Features(
        {
            "image": datasets.Image(),
            "text": datasets.Value("string"),
            "tokens": datasets.Value("int64"),
            "score": datasets.Value("float32"),
        }
    )
    splits = {}
    i = 0
    for split, sizes in (("train", train), ("validation", val)):
        rows = []
        for _ in range(sum(sizes)):
            rows.append(
                {
                    "image": {"bytes": image_bytes(i), "path": None},
                    "text": f"{split} caption {i}",
                    "tokens": 3 + i % 7,
                    "score": i / 8,
                }
            )
            i += 1
        splits[split] = datasets.Dataset.from_list(rows, features=features)
    # the writer's batch size for image datasets: small, so that files hold several batches
    old = datasets.config.ARROW_RECORD_BATCH_SIZE_FOR_IMAGE_DATASETS
    datasets.config.ARROW_RECORD_BATCH_SIZE_FOR_IMAGE_DATASETS = batch
    try:
        for split, sizes in (("train", train), ("validation", val)):
            splits[split].save_to_disk(str(root / split), num_shards=len(sizes))
    finally:
        datasets.config.ARROW_RECORD_BATCH_SIZE_FOR_IMAGE_DATASETS = old
    (root / "dataset_dict.json").write_text('{"splits": ["train", "validation"]}')
    return root


def take_batches(loader, n: int) -> list:
    """The first ``n`` batches of ``loader``."""
    it = iter(loader)
    return [next(it) for _ in range(n)]


def assert_same_batches(a, b) -> None:
    """Batches ``a`` and ``b`` have the same keys, captions and image pixels."""
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.__key__ == y.__key__ and x.caption == y.caption
        assert bool((x.image == y.image).all())
