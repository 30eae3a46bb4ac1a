"""Megatron GPT samples from .bin/.idx corpora: fpipe's Megatron order against megatron-core.

Writes a synthetic corpus of ``--tokens`` uint16 tokens in 3 prefixes (fpipe's writer, the
files megatron-core writes) in a temporary folder, deleted at the end, and prints one JSON
line:

- ``first_batch_s``: from the prefixes on disk to the first batch of 8 training samples in
  hand, cold (megatron-core builds its indices into an empty cache folder, as a first run
  does; fpipe computes its order in memory), for ``fpipe`` and ``megatron``, and their ratio
  ``fpipe_vs_megatron_first_batch``;
- ``samples_per_s``: both through a torch DataLoader with 2 workers, batches of 8 x 4096
  tokens (``nw2_vs_megatron_samples_per_s``: fpipe's over megatron-core's), the best of
  ``--repeats`` alternated runs; the same fields on both sides (``tokens``, ``labels``,
  ``loss_mask``, ``position_ids``), default DataLoader settings for both, and each side's
  per-sample choice of corpus and row inside the timing (fpipe's plan runs in the main
  process as the sampler; megatron-core's ``BlendedDataset`` looks it up in its workers);
  megatron-core's indices are built before (the cold build is ``first_batch_s``);
- ``cpu_ms_per_batch``: CPU time per batch of the main process and of the 2 workers
  together (their start included) in those runs: on a shared machine, their ratio says more
  than the wall-clock rates;
- ``state_bytes``: the size of fpipe's snapshot of the blend's plan;
- ``equal``: the first batches of both hold the same tokens.

Needs megatron-core (``pip install megatron-core``). Usage: ``python bench/megatron_text.py``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
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
    """The batch of a recipe of fpipe's plan, materialized in a worker."""

    def __init__(self, ds):
        self.ds = ds

    def __getitem__(self, recipe):
        batch = self.ds.materialize("train", recipe)
        batch.pop("cu_seqlens")  # made, not sent: megatron-core's batch has no such field
        return batch


class PlanSampler(torch.utils.data.Sampler):
    """fpipe's plan in the main process, as a sampler: its recipes, step by step (the plan
    decides which corpus and row each sample is, as Megatron's BlendedDataset does in its
    workers), so its cost is in the timing as the index lookups are on megatron-core's side."""

    def __init__(self, plan, state):
        self.plan, self.state = plan, state

    def __iter__(self):
        state = self.state
        while True:
            state, recipes = self.plan.next(state)
            if not recipes:
                return
            yield from recipes


def _cpu(who) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def rate(loader, batches: int, warmup: int = 4) -> dict[str, float]:
    """Samples per second of ``batches`` batches after ``warmup``, and the CPU seconds per
    batch of the main process and of the workers (with their start, from fork to exit)."""
    children = _cpu(resource.RUSAGE_CHILDREN)
    it = iter(loader)
    for _ in range(warmup):
        next(it)
    main = _cpu(resource.RUSAGE_SELF)
    t = time.perf_counter()
    for _ in range(batches):
        next(it)
    wall = time.perf_counter() - t
    main = _cpu(resource.RUSAGE_SELF) - main
    it._shutdown_workers()  # joined: their CPU time is counted in RUSAGE_CHILDREN
    del it
    workers = _cpu(resource.RUSAGE_CHILDREN) - children
    return {
        "samples_per_s": batches * BATCH / wall,
        "main_cpu_ms": 1000 * main / batches,
        "workers_cpu_ms": 1000 * workers / (batches + warmup),
    }


def best(runs: list[dict[str, float]]) -> dict[str, float]:
    """The fastest run (the machine may be shared) and its CPU times."""
    return max(runs, key=lambda r: r["samples_per_s"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=510_000_000)
    ap.add_argument("--train-samples", type=int, default=100_000)
    ap.add_argument("--batches", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=2)
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
        ours = torch.utils.data.DataLoader(
            FpipeBatches(ds),
            sampler=PlanSampler(plan, state),
            batch_size=None,
            num_workers=2,
            shuffle=False,
        )
        megatron = torch.utils.data.DataLoader(
            train, batch_size=BATCH, num_workers=2, shuffle=False
        )
        runs: dict[str, list] = {"fpipe": [], "megatron": []}
        for _ in range(args.repeats):  # alternated, the best of each: the machine may be shared
            runs["fpipe"].append(rate(ours, args.batches))
            runs["megatron"].append(rate(megatron, args.batches))
        ours_run, theirs_run = best(runs["fpipe"]), best(runs["megatron"])
        ours_rate, theirs_rate = ours_run["samples_per_s"], theirs_run["samples_per_s"]
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
                "cpu_ms_per_batch": {
                    name: {k: round(run[k], 3) for k in ("main_cpu_ms", "workers_cpu_ms")}
                    for name, run in (("fpipe", ours_run), ("megatron", theirs_run))
                },
                "state_bytes": state_bytes,
                "equal": equal,
            }
        )
    )


if __name__ == "__main__":
    main()
