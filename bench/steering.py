"""Benchmark steering a run: skipping steps, and lineage (which steps saw a sample).

This file is shared by the steering features; each adds its own section and JSON keys
(``skip_10000_steps_s``, ``find_key_refs_per_s``, ...) to the one JSON line printed last.

1. ``skip_10000_steps_s``: the time to pass over 10,000 global steps with
   :func:`fpipe.plan.skip.next_recipe` (what ``loader.skip`` makes the loader's sampler run:
   the plan advances on metadata only, no recipe reaches a worker, and the batch step counts
   the recipes of skipped steps instead of building them) for a blend of 100
   datasets (10,000 samples each, weights 1-7, log-normal token counts, median 300) ->
   window shuffle (1,000) -> ``pack({"tokens": 4096}, strategy=greedy)`` over buffers of 1,000
   -> ``distribute`` -> ``batch`` of ``--packs`` packs per step (world size 1; in global mode
   every rank plans the whole global batch, so the time depends on the global batch, not on
   the world size). Median of ``--repeats`` runs, per CPU second of the process and wall.
2. ``find_key_refs_per_s``: :func:`fpipe.datasets.lineage.find_key` over a CSV table of
   ``--table-rows`` rows, global batch ``--global-batch`` on ``--world`` ranks, window shuffle
   1,000, slice 100: refs of all ranks scanned per second over ``--find-steps`` steps (the
   whole call: building the plan, the key lookup and the scan), for world size 1 and
   ``--world``. Target >= 1,000,000.
3. ``rampup_refs_per_s``: the plan of a Megatron ramp-up (``--ramp START INCR SAMPLES`` up to
   ``--final``, as ``get_train_dataset(global_batch_size=, rampup_batch_size=)`` builds it:
   slice shuffle 100 -> window shuffle 1,000 -> ``distribute`` / ``batch`` over a
   :class:`fpipe.plan.BatchSchedule`) on ``--world`` ranks, rank 0, pulled one step at a time
   over ``--ramp-refs`` global refs (the ramp and full batches after it): global refs planned
   per CPU second, median of ``--repeats``; ``fixed_batch_refs_per_s``: the same plan with the
   final size from step 0, for comparison.
4. ``token_blend_refs_per_s``: a blend of 3 datasets by tokens (``blend(..., unit="tokens")``,
   log-normal token counts, medians 100, 300 and 1,000) pulled in blocks of 256 refs;
   ``sample_blend_refs_per_s``: the same blend by samples.

5. Online weights and seek, on a blend of 100 datasets (10,000 samples each) -> window shuffle
   (1,000) -> ``distribute`` / ``batch`` of ``--seek-global`` refs per step:
   ``set_weights_ms``: the plan work of ``loader.set_weights`` mid-run (the weights resolved,
   the next step found, the change applied at the blend's frontier; no torch.distributed),
   median of 50; ``seek_1e6_s``: :func:`fpipe.loader.steering.seek_state` to step
   ``--seek-steps`` (default 1e6; scaled to 1e6 steps when another count is given, which
   ``seek_steps`` says) from the configuration with 10 online changes on the way (the steps
   passed on counts, :meth:`fpipe.core.Pipeline.advance`); ``seek_1e6_packing_s``: the same
   for the packed plan of [1] (``--packs`` packs per step), whose packer needs every ref's
   token count, so every step is planned;
   ``online_blend_refs_per_s``: refs planned per CPU second pulling ``--online-steps`` steps
   of ``--online-global`` refs (default 256) with the weights changed every 100 steps, and
   ``online_vs_static_blend`` its ratio to the same plan without changes (target >= 0.9);
   medians of ``--online-repeats`` interleaved runs (each is ~0.4 s of CPU, so three were
   within this machine's run-to-run noise).
   Each change re-gathers the refs the blend had prepared past its frontier (one block of
   8,192 positions over the 100 datasets), so the ratio falls when changes come more often
   than every few blocks (every 100 steps of 8 refs: about 0.4).
   ``state_bytes_{samples,tokens}[_online|_pending]``: the loader snapshot's bytes for that
   plan blended by samples and by tokens: fixed weights, one online change in force, and a
   second one waiting behind the shuffle window.

6. What a seek costs on each kind of plan the loader builds: ``seek_1e6_s_<plan>``, CPU seconds
   of :func:`fpipe.loader.steering.seek_state` to step 1,000,000 from the configuration (no
   online changes, ``--seek-global`` refs per step, one rank), median of ``--repeats`` fresh
   plans, for ``single`` (one dataset of ``--per-dataset`` x 10 samples: slice shuffle 100 ->
   ``repeat`` -> window shuffle 1,000 -> ``distribute`` / ``batch``), ``blend`` and
   ``token_blend`` (the plan of section 5, blended by samples and by tokens), ``buckets``
   (``bucket_batches`` over ``--bucket-samples`` samples of bench/buckets.py's mix of shapes,
   OpenSora's example config with every probability 1, rank 0 of 8) and ``packing`` (the plan
   of section 1). Where a seek plans every step (``packing``: its packer needs each ref's
   tokens) or reads every epoch (``buckets_drawn``: the same config with OpenSora's
   probabilities, 0.25-1, drawn again per sample every epoch) the row is measured over
   ``--seek-linear-steps`` steps and scaled to 1e6 (``seek_linear_steps`` says so).
   ``seek_1e15_s_<plan>``: wall seconds to seek step 10**15, and ``seek_1e15_<plan>`` what
   came back: ``state`` (the counts reach it) or ``refused`` (a ConfigError: past the 64-bit
   counters of the state, or too many steps or positions decided one at a time).

``--sections 5`` runs only section 5 (any comma-separated list of 1-6).

Usage: ``python bench/steering.py [--repeats 3]``. The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import machine_line

from fpipe.core import Pipeline, chain
from fpipe.plan import batch, blend, distribute, pack, samples, slice_shuffle, window_shuffle
from fpipe.plan.skip import next_recipe


def blend_pack_plan(args) -> Pipeline:
    """100 datasets blended, window-shuffled, packed (greedy, 4096 tokens), batched."""
    rng = np.random.default_rng(args.seed)
    views = []
    for d in range(args.datasets):
        n = args.per_dataset
        tokens = np.clip(rng.lognormal(np.log(300), 1.0, n), 16, 4096).astype(np.int64)
        views.append(slice_shuffle(samples(n, dataset=d, columns={"tokens": tokens}), 100))
    head = blend(
        views,
        weights=[1 + d % 7 for d in range(args.datasets)],
        names=[f"ds{d:03d}" for d in range(args.datasets)],
    )
    stages = (
        window_shuffle(1000),
        pack({"tokens": 4096}, strategy="greedy", packing_buffer_size=1000),
        distribute(args.packs),
        batch(args.packs),
    )
    return Pipeline(chain(head, *stages), seed=args.seed)


def skip_time(args) -> dict:
    p = blend_pack_plan(args)
    start = p.init()
    for _ in range(50):  # warm-up, and a start inside the stream
        start, _ = p.next(start, 1)
    first = p.next(start, 1)[1][0].step
    ranges = ((first, first + args.skip_steps),)
    cpu, wall, refs = [], [], 0
    for _ in range(args.repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        state, recipe, skipped = next_recipe(p, start, ranges)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - t0)
        assert skipped == args.skip_steps and recipe.step == first + args.skip_steps
    # refs the skipped steps hold (not timed)
    state = start
    for _ in range(args.skip_steps):
        state, out = p.next(state, 1)
        refs += len(out[0].refs)
    return {
        "skip_10000_steps_s": round(statistics.median(cpu), 3),
        "skip_10000_steps_wall_s": round(statistics.median(wall), 3),
        "skip_refs_per_step": round(refs / args.skip_steps, 1),
    }


def write_table(root: Path, rows: int) -> Path:
    """A CSV table of ``rows`` text samples, prepared (``fpipe prepare``): its index folder."""
    from fpipe.storage import prepare_dataset

    path = root / "meta.csv"
    lines = ["text,tokens"] + [f"sample {i},{16 + (i * 7919) % 4000}" for i in range(rows)]
    path.write_text("\n".join(lines) + "\n")
    prepare_dataset(path)
    return root


def find_rate(args, table: Path, world: int) -> tuple[float, float, int]:
    """(scanned refs per CPU second, per wall second, hits), median of ``--repeats``."""
    from fpipe.datasets.lineage import find_key
    from fpipe.datasets.plan_config import load_plan_config

    cfg = load_plan_config(
        table,
        dict(
            global_batch_size=args.global_batch,
            world_size=world,
            seed=args.seed,
            shuffle_buffer_size=1000,
            max_samples_per_sequence=100,
        ),
    )
    key = f"meta/{args.table_rows // 3}"
    cpu, wall = [], []
    for _ in range(args.repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        got = find_key(cfg, key, (0, args.find_steps))
        cpu.append(got["scanned_refs"] / (time.process_time() - c0))
        wall.append(got["scanned_refs"] / (time.perf_counter() - t0))
    assert got["scanned_refs"] == args.find_steps * args.global_batch
    return statistics.median(cpu), statistics.median(wall), len(got["hits"])


def ramp_plan(args, schedule) -> Pipeline:
    """Rank 0 of ``--world``: slice shuffle, window shuffle, distribute and batch by
    ``schedule`` (a BatchSchedule, or an int: one global batch size)."""
    from fpipe.plan import BatchSchedule, repeat

    view = slice_shuffle(samples(args.table_rows), 100)
    w = args.world
    per_rank = schedule // w if isinstance(schedule, int) else BatchSchedule.per_rank(schedule, w)
    stages = (window_shuffle(1000), distribute(schedule, rank=0, world_size=w), batch(per_rank))
    return Pipeline(chain(repeat(view), *stages), seed=args.seed)


def pull_refs_rate(make, refs_per_step, total: int, repeats: int) -> float:
    """Global refs planned per CPU second while pulling ``total`` refs one step at a time from
    a fresh plan (``make()``), median of ``repeats``."""
    rates = []
    for _ in range(repeats):
        p = make()
        state, done, step = p.init(), 0, 0
        c0 = time.process_time()
        while done < total:
            state, _ = p.next(state, 1)
            done += refs_per_step(step)
            step += 1
        rates.append(done / (time.process_time() - c0))
    return statistics.median(rates)


def rampup_rates(args) -> dict:
    from fpipe.plan import BatchSchedule

    start, incr, ramp_samples = args.ramp
    schedule = BatchSchedule.rampup(start, incr, ramp_samples, final=args.final)
    ramp = pull_refs_rate(
        lambda: ramp_plan(args, schedule), schedule.size_at, args.ramp_refs, args.repeats
    )
    fixed = pull_refs_rate(
        lambda: ramp_plan(args, args.final), lambda s: args.final, args.ramp_refs, args.repeats
    )
    return {
        "rampup_refs_per_s": round(ramp),
        "fixed_batch_refs_per_s": round(fixed),
        "rampup_steps": schedule.steps[-1],
    }


def token_blend_rates(args) -> dict:
    from fpipe.plan.blend import blend as blend_

    rng = np.random.default_rng(args.seed)
    n = 100_000
    views = [
        slice_shuffle(
            samples(n, dataset=d, columns={"tokens": rng.lognormal(np.log(m), 0.5, n)}), 100
        )
        for d, m in enumerate((100, 300, 1000))
    ]
    out = {}
    for unit, key in ((None, "sample_blend_refs_per_s"), ("tokens", "token_blend_refs_per_s")):
        rates = []
        for _ in range(args.repeats):
            p = Pipeline(blend_(views, weights=[1, 1, 1], unit=unit), args.seed)
            state, c0 = p.init(), time.process_time()
            for _ in range(400):
                state, _ = p.next(state, 256)
            rates.append(400 * 256 / (time.process_time() - c0))
        out[key] = round(statistics.median(rates))
    return out


def seek_plan(
    args, packed: bool = False, global_batch: int | None = None, unit: str | None = None
) -> Pipeline:
    """The plan of section 5 (``packed``: the plan of section 1), ``global_batch`` refs per
    step (default ``--seek-global``); ``unit="tokens"``: blended by tokens."""
    if packed:
        return blend_pack_plan(args)
    rng = np.random.default_rng(args.seed)
    views = []
    for d in range(args.datasets):
        n = args.per_dataset
        cols = {"tokens": rng.integers(16, 4096, n)} if unit else {}
        views.append(slice_shuffle(samples(n, dataset=d, columns=cols), 100))
    head = blend(
        views,
        weights=[1 + d % 7 for d in range(args.datasets)],
        names=[f"ds{d:03d}" for d in range(args.datasets)],
        unit=unit,
    )
    g = global_batch or args.seek_global
    return Pipeline(chain(head, window_shuffle(1000), distribute(g), batch(g)), seed=args.seed)


def _changes(args, every: int, until: int) -> list:
    from fpipe.loader.steering import MixChange

    rng = np.random.default_rng(args.seed)
    return [
        MixChange(step, tuple(float(w) for w in rng.integers(1, 8, args.datasets)))
        for step in range(every, until, every)
    ]


def state_sizes(args) -> dict:
    """Loader snapshot bytes of the section-5 plan by samples and by tokens: without online
    weights, with one change in force, and with a second one waiting behind the shuffle
    window (the most a window -> distribute -> batch plan holds)."""
    from fpipe.loader.state import LoaderState, encode_loader_state
    from fpipe.loader.steering import MixChange, seek_state

    out: dict = {}
    rng = np.random.default_rng(args.seed)
    for unit, name in ((None, "samples"), ("tokens", "tokens")):
        p = seek_plan(args, unit=unit)
        first, second = (
            MixChange(step, tuple(rng.integers(1, 8, args.datasets) * 1.0)) for step in (1, 130)
        )
        sizes = []
        for target, changes in ((1, []), (1, [first]), (130, [first, second])):
            state, batches, refs, epoch = seek_state(p, target, (), changes)
            data = encode_loader_state(p, LoaderState(state, batches, refs, 0, epoch))
            sizes.append(len(data))
        for key, size in zip(("", "_online", "_pending"), sizes):
            out[f"state_bytes_{name}{key}"] = size
    return out


def online_rates(args) -> dict:
    from fpipe.loader.steering import (
        MixChange,
        apply_change,
        next_step,
        planned_recipes,
        resolve_weights,
        seek_state,
    )
    from fpipe.plan.online_mix import entry_weights

    out: dict = {}
    p = seek_plan(args)
    names = [f"ds{d:03d}" for d in range(args.datasets)]
    state = p.init()
    for _ in range(50):
        state, _ = p.next(state, 1)
    times = []
    rng = np.random.default_rng(args.seed)
    for _ in range(50):
        weights = dict(zip(names, rng.integers(1, 8, args.datasets).tolist()))
        t0 = time.perf_counter()
        raw = resolve_weights(weights, names)
        step = next_step(p, state)
        changed = apply_change(p, state, MixChange(step, entry_weights(raw)))
        times.append(time.perf_counter() - t0)
        state, _ = p.next(changed, 1)
    out["set_weights_ms"] = round(1000 * statistics.median(times), 3)

    for packed, key in ((False, "seek_1e6_s"), (True, "seek_1e6_packing_s")):
        steps = args.seek_steps
        chg = _changes(args, max(1, steps // 10), steps)
        plan = seek_plan(args, packed)
        c0 = time.process_time()
        seek_state(plan, steps, (), chg)
        out[key] = round((time.process_time() - c0) * 1_000_000 / steps, 2)
    out["seek_steps"] = args.seek_steps

    rates: dict = {"online": [], "static": []}
    for _ in range(args.online_repeats):
        for kind in ("static", "online"):
            chg = _changes(args, 100, args.online_steps) if kind == "online" else []
            plan = seek_plan(args, global_batch=args.online_global)
            c0, refs = time.process_time(), 0
            for _, (_, recipe) in zip(
                range(args.online_steps), planned_recipes(plan, plan.init(), (), chg)
            ):
                refs += len(recipe.refs)
            rates[kind].append(refs / (time.process_time() - c0))
    online, static = statistics.median(rates["online"]), statistics.median(rates["static"])
    out["online_blend_refs_per_s"] = round(online)
    out["static_blend_refs_per_s"] = round(static)
    out["online_vs_static_blend"] = round(online / static, 3)
    return out


#: OpenSora's example bucket_config (docs/buckets.md), as bench/buckets.py uses it.
OPENSORA_BUCKETS = {
    "1:1": {
        256: {1: (1.0, 64), 17: (1.0, 16), 65: (0.5, 4)},
        512: {1: (1.0, 16), 17: (1.0, 4), 65: (0.25, 1)},
    },
    "16:9": {"240x426": {17: (1.0, 8), 65: (0.5, 2)}, "480x854": {17: (0.5, 2), 65: (0.25, 1)}},
    "9:16": {"426x240": {17: (1.0, 8)}},
}


def bucket_plan(args, drawn: bool) -> Pipeline:
    """``bucket_batches`` over bench/buckets.py's mix of video and image shapes, rank 0 of 8;
    ``drawn``: OpenSora's probabilities, else every probability 1 (nothing drawn)."""
    from fpipe.plan import bucket_batches

    rng = np.random.default_rng(args.seed)
    n = args.bucket_samples
    short = rng.choice([240, 360, 480, 720, 1080], n, p=[0.2, 0.25, 0.25, 0.2, 0.1])
    kind = rng.choice(3, n, p=[0.6, 0.15, 0.25])  # landscape, portrait, square-ish
    long_ = (short * np.where(kind == 2, rng.uniform(0.9, 1.1, n), 16 / 9)).round()
    frames = np.exp(rng.normal(np.log(80), 0.8, n)).clip(2, 300).astype(np.int64)
    frames[rng.random(n) < 0.3] = 1
    cols = {
        "width": np.where(kind == 1, short, long_).astype(np.int64),
        "height": np.where(kind == 1, long_, short).astype(np.int64),
        "num_frames": frames,
    }
    config = {
        aspect: {res: {t: (p if drawn else 1.0, bs) for t, (p, bs) in opts.items()}
                 for res, opts in table.items()}
        for aspect, table in OPENSORA_BUCKETS.items()
    }  # fmt: skip
    view = slice_shuffle(samples(n, columns=cols), 100)
    return Pipeline(bucket_batches(view, config, rank=0, world_size=8), seed=args.seed)


def single_plan(args) -> Pipeline:
    """One dataset of ``--per-dataset`` x 10 samples: slice shuffle, repeat, window shuffle,
    distribute and batch of ``--seek-global`` refs per step."""
    from fpipe.plan import repeat

    n = 10 * args.per_dataset
    tokens = np.random.default_rng(args.seed).integers(16, 4096, n)
    view = slice_shuffle(samples(n, columns={"tokens": tokens}), 100)
    g = args.seek_global
    stages = (window_shuffle(1000), distribute(g), batch(g))
    return Pipeline(chain(repeat(view), *stages), seed=args.seed)


def seek_costs(args) -> dict:
    from fpipe.core.errors import ConfigError
    from fpipe.loader.steering import seek_state

    plans = {
        "single": (lambda: single_plan(args), False),
        "blend": (lambda: seek_plan(args), False),
        "token_blend": (lambda: seek_plan(args, unit="tokens"), False),
        "buckets": (lambda: bucket_plan(args, drawn=False), False),
        "buckets_drawn": (lambda: bucket_plan(args, drawn=True), True),
        "packing": (lambda: seek_plan(args, packed=True), True),
    }
    out: dict = {}
    for name, (make, linear) in plans.items():
        steps = args.seek_linear_steps if linear else 1_000_000
        cpu = []
        for _ in range(args.repeats):
            plan = make()
            c0 = time.process_time()
            seek_state(plan, steps, (), ())
            cpu.append((time.process_time() - c0) * 1_000_000 / steps)
        out[f"seek_1e6_s_{name}"] = round(statistics.median(cpu), 3)
        plan = make()
        t0 = time.perf_counter()
        try:
            seek_state(plan, 10**15, (), ())
            outcome = "state"
        except ConfigError as e:
            outcome = "refused"
            print(f"  {name} at 1e15: {e}")
        out[f"seek_1e15_s_{name}"] = round(time.perf_counter() - t0, 3)
        out[f"seek_1e15_{name}"] = outcome
    out["seek_linear_steps"] = args.seek_linear_steps
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", type=int, default=100)
    ap.add_argument("--per-dataset", type=int, default=10_000)
    ap.add_argument("--packs", type=int, default=8, help="packs of 4096 tokens per step")
    ap.add_argument("--skip-steps", type=int, default=10_000)
    ap.add_argument("--table-rows", type=int, default=200_000)
    ap.add_argument("--global-batch", type=int, default=256)
    ap.add_argument("--world", type=int, default=8)
    ap.add_argument("--find-steps", type=int, default=4000)
    ap.add_argument("--ramp", type=int, nargs=3, default=[32, 32, 10_000])
    ap.add_argument("--final", type=int, default=256, help="global batch after the ramp")
    ap.add_argument("--ramp-refs", type=int, default=200_000)
    ap.add_argument("--seek-global", type=int, default=8, help="refs per step in [5]")
    ap.add_argument("--seek-steps", type=int, default=1_000_000)
    ap.add_argument(
        "--seek-linear-steps", type=int, default=20_000, help="steps of the [6] rows that plan each"
    )
    ap.add_argument("--bucket-samples", type=int, default=100_000, help="samples of [6] buckets")
    ap.add_argument("--online-steps", type=int, default=3000)
    ap.add_argument("--online-global", type=int, default=256, help="refs per step, online rows")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--online-repeats", type=int, default=9, help="interleaved runs of the online rows"
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--sections", default="1,2,3,4,5,6", help="sections to run, e.g. 5 (comma-separated)"
    )
    args = ap.parse_args(argv)
    params = " ".join(f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items())
    print(f"bench/steering.py {params}")
    print(machine_line())
    result: dict = {}

    sections = {int(x) for x in args.sections.split(",")}
    if 1 in sections:
        print(
            f"\n[1] skip {args.skip_steps:,} steps: blend of {args.datasets} datasets -> window "
            f"shuffle -> pack (greedy, 4096 tokens) -> batch of {args.packs} packs"
        )
        result.update(skip_time(args))
        print(
            f"  {result['skip_10000_steps_s']:.3f} s per CPU "
            f"({result['skip_10000_steps_wall_s']:.3f} s wall), "
            f"{result['skip_refs_per_step']} refs per step (target < 1 s)"
        )

    if 2 in sections:
        print(
            f"\n[2] find_key over {args.find_steps:,} steps of {args.global_batch} refs, "
            f"table of {args.table_rows:,} rows"
        )
        with tempfile.TemporaryDirectory() as tmp:
            table = write_table(Path(tmp), args.table_rows)
            for world in sorted({1, args.world}):
                rate, wall, hits = find_rate(args, table, world)
                print(
                    f"  world {world}: {rate:,.0f} refs/s per CPU ({wall:,.0f} wall), {hits} hits"
                )
                result[f"find_key_refs_per_s_w{world}"] = round(rate)
            result["find_key_refs_per_s"] = result[f"find_key_refs_per_s_w{args.world}"]

    if 3 in sections:
        start, incr, ramp_samples = args.ramp
        print(
            f"\n[3] ramp-up {start} + {incr} over {ramp_samples:,} samples to {args.final}, "
            f"{args.world} ranks, {args.ramp_refs:,} global refs"
        )
        result.update(rampup_rates(args))
        print(
            f"  {result['rampup_refs_per_s']:,} refs/s per CPU ({result['rampup_steps']} ramp "
            f"steps); fixed batch of {args.final}: {result['fixed_batch_refs_per_s']:,}"
        )

    if 4 in sections:
        print("\n[4] blend of 3 datasets by tokens, blocks of 256 refs")
        result.update(token_blend_rates(args))
        print(
            f"  by tokens {result['token_blend_refs_per_s']:,} refs/s per CPU; by samples "
            f"{result['sample_blend_refs_per_s']:,}"
        )

    if 5 in sections:
        print(
            f"\n[5] online weights and seek: {args.datasets} datasets, window 1000, "
            f"{args.seek_global} refs per step"
        )
        result.update(online_rates(args))
        result.update(state_sizes(args))
        print(
            f"  set_weights {result['set_weights_ms']} ms; seek to step 1e6: "
            f"{result['seek_1e6_s']} s CPU (packed plan: {result['seek_1e6_packing_s']} s; "
            f"measured over {result['seek_steps']:,} steps); online blend "
            f"{result['online_blend_refs_per_s']:,} refs/s per CPU, "
            f"{result['online_vs_static_blend']} of static"
        )
        print(
            "  loader snapshot bytes (samples / tokens): "
            + ", ".join(
                f"{label} {result[f'state_bytes_samples{k}']:,} / "
                f"{result[f'state_bytes_tokens{k}']:,}"
                for label, k in (("fixed", ""), ("online", "_online"), ("pending", "_pending"))
            )
        )

    if 6 in sections:
        print(
            f"\n[6] seek to step 1e6 by plan ({args.seek_global} refs per step; packing and "
            f"drawn buckets measured over {args.seek_linear_steps:,} steps, scaled), and to 1e15"
        )
        result.update(seek_costs(args))
        for name in ("single", "blend", "token_blend", "buckets", "buckets_drawn", "packing"):
            print(
                f"  {name:13s} {result[f'seek_1e6_s_{name}']:8.3f} s CPU per 1e6 steps; step "
                f"1e15: {result[f'seek_1e15_{name}']} in {result[f'seek_1e15_s_{name}']} s"
            )

    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
