"""Megatron GPT samples from .bin/.idx corpora: fpipe's Megatron order against megatron-core.

Writes a synthetic corpus of ``--tokens`` uint16 tokens in 3 prefixes (fpipe's writer, the
files megatron-core writes) in a temporary folder, deleted at the end, and prints one JSON
line:

- ``first_batch_s``: from the prefixes on disk to the first batch of 8 training samples in
  hand, cold (megatron-core builds its indices into an empty cache folder, as a first run
  does; fpipe computes its order in memory), for ``fpipe`` and ``megatron``, and their ratio
  ``fpipe_vs_megatron_first_batch``;
- ``samples_per_s``: both through a torch DataLoader with 2 workers, batches of 8 x 4096
  tokens (``nw2_vs_megatron_samples_per_s``: fpipe's over megatron-core's);
- ``state_bytes``: the size of fpipe's snapshot of the blend's plan;
- ``equal``: the first batches of both hold the same tokens.

Needs megatron-core (``pip install megatron-core``). Usage: ``python bench/megatron_text.py``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import tempfile
import time
import warnings

import numpy as np
import torch

from fpipe.storage.prepare.megatron_writer import IndexedCorpusWriter

SEQ = 4096
BATCH = 8
EOD = 0
WEIGHTS = [0.5, 0.3, 0.2]


def write_corpora(root: str, tokens: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    prefixes = []
    per = tokens // len(WEIGHTS)
    for c in range(len(WEIGHTS)):
        prefix = os.path.join(root, f"corpus{c}")
        with IndexedCorpusWriter(prefix, dtype=np.uint16) as w:
            left = per
            while left > 0:
                lengths = rng.integers(50, 2000, 4096)
                ends = np.cumsum(lengths)
                lengths = lengths[ends <= left] if ends[-1] > left else lengths
                if not len(lengths):
                    break
                body = rng.integers(1, 50000, int(lengths.sum()), dtype=np.uint16)
                body[np.cumsum(lengths) - 1] = EOD
                w.add_document(body, lengths=lengths.tolist())
                left -= int(lengths.sum())
        prefixes.append(prefix)
    return prefixes


class _Tokenizer:
    eod = EOD
    vocab_size = None
    unique_identifiers = {"class": "bench tokenizer"}


def megatron_datasets(prefixes, sizes, cache):
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    config = GPTDatasetConfig(
        random_seed=1234,
        sequence_length=SEQ,
        blend=(prefixes, WEIGHTS),
        split="969,30,1",
        tokenizer=_Tokenizer(),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
        path_to_cache=cache,
    )
    return BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, config).build()


class FpipeBatches(torch.utils.data.Dataset):
    """Batch ``step`` of fpipe's plan, materialized in a worker."""

    def __init__(self, ds, recipes):
        self.ds, self.recipes = ds, recipes

    def __len__(self):
        return len(self.recipes)

    def __getitem__(self, step):
        batch = self.ds.materialize("train", self.recipes[step])
        batch.pop("cu_seqlens")
        return batch


def rate(loader, batches: int, warmup: int = 4) -> float:
    it = iter(loader)
    for _ in range(warmup):
        next(it)
    t = time.perf_counter()
    for _ in range(batches):
        next(it)
    return batches * BATCH / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=510_000_000)
    ap.add_argument("--train-samples", type=int, default=100_000)
    ap.add_argument("--batches", type=int, default=150)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    logging.getLogger("megatron").setLevel(logging.ERROR)
    sizes = [args.train_samples, 2000, 200]
    root = tempfile.mkdtemp(prefix="fpipe_megatron_bench_")
    try:
        prefixes = write_corpora(root, args.tokens)
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        torch.distributed.init_process_group(
            "gloo", rank=0, world_size=1, init_method=f"file://{root}/pg"
        )
        from fpipe.datasets.megatron_gpt import MegatronGPT

        t = time.perf_counter()
        ds = MegatronGPT(
            prefixes,
            weights=WEIGHTS,
            split="969,30,1",
            num_samples=sizes,
            seq_length=SEQ,
            seed=1234,
            eod=EOD,
        )
        plan = ds.plan("train", BATCH)
        state, recipes = plan.next(plan.init())
        first = ds.materialize("train", recipes[0])
        fpipe_first = time.perf_counter() - t

        t = time.perf_counter()
        train = megatron_datasets(prefixes, sizes, os.path.join(root, "cache"))[0]
        theirs = torch.utils.data.default_collate([train[i] for i in range(BATCH)])
        megatron_first = time.perf_counter() - t
        equal = bool(torch.equal(first["tokens"], theirs["tokens"]))

        state_bytes = len(plan.snapshot(state))
        all_recipes = list(recipes)
        while len(all_recipes) < args.batches + 8:
            state, more = plan.next(state, args.batches + 8 - len(all_recipes))
            all_recipes += list(more)
        ours = torch.utils.data.DataLoader(
            FpipeBatches(ds, all_recipes), batch_size=None, num_workers=2, shuffle=False
        )
        megatron = torch.utils.data.DataLoader(
            train, batch_size=BATCH, num_workers=2, shuffle=False
        )
        ours_rate = rate(ours, args.batches)
        theirs_rate = rate(megatron, args.batches)
        torch.distributed.destroy_process_group()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        json.dumps(
            {
                "tokens": args.tokens,
                "train_samples": args.train_samples,
                "first_batch_s": {
                    "fpipe": round(fpipe_first, 3),
                    "megatron": round(megatron_first, 3),
                },
                "fpipe_vs_megatron_first_batch": round(megatron_first / fpipe_first, 2),
                "samples_per_s": {"fpipe": round(ours_rate, 1), "megatron": round(theirs_rate, 1)},
                "nw2_vs_megatron_samples_per_s": round(ours_rate / theirs_rate, 2),
                "state_bytes": state_bytes,
                "equal": equal,
            }
        )
    )


if __name__ == "__main__":
    main()
