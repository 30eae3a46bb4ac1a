"""Benchmark sequence packing: padding of each strategy, image balance, plan-tier throughput.

Length distribution (stated, seeded): ``--samples`` samples with token counts
``round(lognormal(log(300), --sigma))`` clipped to [16, 4096] (median 300), and 0-4 images per
sample (uniform). In one run:

1. Padding fraction of pad-to-longest in batches of 16 (stream order), of a fixed max length
   (every sample padded to 4096), and of each strategy (``greedy``, ``ffd``, ``bfd``,
   ``balanced``) at budget 4096 tokens with ``packing_buffer_size`` 1000: padded tokens over all
   tokens of the packs (each pack is 4096 long). ``greedy``/``ffd``/``bfd`` pack on the token
   budget; ``balanced`` packs under two budgets at once (4096 tokens, ``--images`` images), as
   it is meant to; every strategy is also measured under both budgets (``*_two_budgets``).
2. Image load balance: max / mean images per pack, over all packs of the run.
3. Throughput: refs per second through the packing selection (over-budget policy plus the
   algorithm, buffer by buffer, median of ``--repeats``), per strategy; ``pack_refs_per_s`` is
   the plan pipeline ``samples -> pack -> batch`` pulled recipe by recipe with ``balanced``
   (the slowest strategy), per CPU second of this process; ``pack_refs_per_s_ffd``,
   ``pack_refs_per_s_bfd`` and ``pack_refs_per_s_greedy`` the same pipeline with those
   strategies (both budgets), and
   ``pack_refs_per_s_{ffd,balanced}_tokens_only`` with the token budget alone.

Usage: ``python bench/packing.py [--samples 100000] [--repeats 3]``. Targets: ``ffd`` and
``balanced`` pad at most 2% of tokens; ``balanced`` keeps max/mean images per pack at most
1.25; at least 200,000 refs/s. The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import _common  # noqa: F401  (puts the repository root on sys.path)
import numpy as np

from fpipe.plan.packing.algorithms import ALGORITHMS, apply_over_budget

BUDGET = 4096


def lengths(n: int, sigma: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Token counts (log-normal, median 300, clipped to [16, 4096]) and images (0-4)."""
    rng = np.random.default_rng(seed)
    tokens = np.clip(np.round(rng.lognormal(np.log(300), sigma, n)), 16, BUDGET).astype(np.int64)
    images = rng.integers(0, 5, n).astype(np.int64)
    return tokens, images


def pad_to_longest(tokens: np.ndarray, batch: int) -> float:
    """Padding fraction when each batch of ``batch`` is padded to its longest sample."""
    n = len(tokens) // batch * batch
    rows = tokens[:n].reshape(-1, batch)
    return 1.0 - rows.sum() / (rows.max(axis=1).sum() * batch)


def packed(algorithm, costs: np.ndarray, limits, buffer: int) -> tuple[list, list]:
    """Packs of each buffer: (per-pack cost sums, per-buffer packings)."""
    loads, packings = [], []
    for start in range(0, len(costs), buffer):
        chunk = costs[start : start + buffer]
        keep, c = apply_over_budget(chunk, limits)
        p = algorithm(c, limits)
        loads.append(p.loads(c))
        packings.append(p.take(keep + start))
    return loads, packings


def padding_of(loads: list) -> float:
    tokens = np.concatenate([x[:, 0] for x in loads])
    return 1.0 - tokens.sum() / (len(tokens) * BUDGET)


def image_ratio(packings: list, images: np.ndarray) -> float:
    per_pack = np.concatenate([p.loads(images) for p in packings])
    return float(per_pack.max() / per_pack.mean())


def rate(algorithm, costs, limits, buffer: int, repeats: int) -> float:
    """Median refs/s of the selection alone (per CPU second)."""
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        packed(algorithm, costs, limits, buffer)
        times.append(time.process_time() - t0)
    return len(costs) / statistics.median(times)


def plan_rate(tokens, images, limits, strategy, buffer: int, repeats: int) -> float | None:
    """Median refs/s of ``samples -> pack -> batch`` pulled one recipe at a time, or None when
    the plan-tier packing step is not available."""
    try:
        from fpipe.core import Pipeline, chain
        from fpipe.plan import batch, pack, repeat, samples
    except ImportError:
        return None
    cols = {"tokens": tokens, "images": images}
    budgets = (
        {"tokens": limits[0], "images": limits[1]} if len(limits) > 1 else {"tokens": limits[0]}
    )
    times = []
    for _ in range(repeats):
        p = Pipeline(
            chain(
                repeat(samples(len(tokens), columns=cols), 1),
                pack(budgets, strategy=strategy, packing_buffer_size=buffer),
                batch(16, drop_last=False),
            ),
            seed=0,
        )
        state, refs = p.init(), 0
        t0 = time.process_time()
        while True:
            state, out = p.next(state, 1)
            if not len(out):
                break
            refs += len(out[0].refs)
        times.append(time.process_time() - t0)
    return refs / statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--sigma", type=float, default=1.0, help="log-normal sigma of token counts")
    ap.add_argument("--images", type=int, default=32, help="image budget per pack")
    ap.add_argument("--buffer", type=int, default=1000, help="packing_buffer_size")
    ap.add_argument("--batch", type=int, default=16, help="batch of pad-to-longest")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    tokens, images = lengths(args.samples, args.sigma, args.seed)
    two = np.stack([tokens, images], axis=1)
    limits2 = [BUDGET, args.images]
    print(
        f"{args.samples} samples: tokens median {np.median(tokens):.0f} mean {tokens.mean():.0f}"
        f" max {tokens.max()}; images mean {images.mean():.2f}; budget {BUDGET} tokens"
        f" (+ {args.images} images), packing_buffer_size {args.buffer}"
    )
    out = {
        "samples": args.samples,
        "padding_pad_to_longest": pad_to_longest(tokens, args.batch),
        "padding_fixed_max": 1.0 - tokens.mean() / BUDGET,
    }
    for name, algorithm in sorted(ALGORITHMS.items()):
        loads1, packs1 = packed(algorithm, tokens, BUDGET, args.buffer)
        loads2, packs2 = packed(algorithm, two, limits2, args.buffer)
        main_loads, main_packs = (loads2, packs2) if name == "balanced" else (loads1, packs1)
        out[f"padding_{name}"] = padding_of(main_loads)
        out[f"padding_{name}_two_budgets"] = padding_of(loads2)
        out[f"{name}_image_load_ratio"] = image_ratio(main_packs, images)
        out[f"{name}_image_load_ratio_two_budgets"] = image_ratio(packs2, images)
        out[f"{name}_samples_per_pack"] = args.samples / sum(len(x) for x in main_loads)
        out[f"select_refs_per_s_{name}"] = rate(
            algorithm,
            two if name == "balanced" else tokens,
            limits2 if name == "balanced" else BUDGET,
            args.buffer,
            args.repeats,
        )
        print(
            f"{name:9s} padding {out[f'padding_{name}']:.4f} (two budgets"
            f" {out[f'padding_{name}_two_budgets']:.4f}); image max/mean"
            f" {out[f'{name}_image_load_ratio']:.3f}; selection"
            f" {out[f'select_refs_per_s_{name}']:,.0f} refs/s"
        )
    out["balanced_image_load_ratio"] = out.pop("balanced_image_load_ratio")
    plan = plan_rate(tokens, images, limits2, "balanced", args.buffer, args.repeats)
    out["pack_refs_per_s"] = plan if plan is not None else out["select_refs_per_s_balanced"]
    out["pack_refs_per_s_source"] = "plan" if plan is not None else "selection"
    print(f"plan tier through packing (balanced): {out['pack_refs_per_s']:,.0f} refs/s")
    for name in ("ffd", "bfd", "greedy"):
        rate_ = plan_rate(tokens, images, limits2, name, args.buffer, args.repeats)
        out[f"pack_refs_per_s_{name}"] = rate_
        if rate_ is not None:
            print(f"plan tier through packing ({name}, two budgets): {rate_:,.0f} refs/s")
    for name in ("ffd", "balanced"):
        rate_ = plan_rate(tokens, images, [BUDGET], name, args.buffer, args.repeats)
        out[f"pack_refs_per_s_{name}_tokens_only"] = rate_
        if rate_ is not None:
            print(f"plan tier through packing ({name}, tokens only): {rate_:,.0f} refs/s")
    out["loadavg"] = os.getloadavg()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
