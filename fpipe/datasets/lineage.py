"""Lineage: which global steps, ranks and positions a sample takes, from the plan alone.

``fpipe plan --step N`` answers step -> samples; :func:`find_key` answers the reverse (sample ->
every ``(step, rank, position, epoch)`` where it is delivered), to trace a bad document, remove
contaminated data or explain a loss spike. :func:`step_samples` lists every sample of a range
of steps (``fpipe plan --steps A:B --keys``), for removing or auditing data.

Only the plan runs: the dataset index is read (keys, metadata columns), never a payload. A key
is looked up once per dataset; the scan then compares integer columns, step by step. In global
mode with the plain ``distribute -> batch`` tail, one plan of the whole global batch (world size
1, the same global order: rank, world size and batch sizes are compatible fields of the
fingerprint) gives every rank's part of each step; otherwise each rank's plan runs in lockstep.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec
import numpy as np

from fpipe.core.errors import ConfigError
from fpipe.core.records import Refs
from fpipe.datasets.plan_config import PlanConfig, build_dataset
from fpipe.plan.batch import BatchConfig
from fpipe.plan.distribute import DistributeConfig
from fpipe.plan.skip import normalize_step_ranges, skip_end

__all__ = ["advance_steps", "find_key", "scan_steps", "step_samples", "steps_of"]

#: The fields of the ``distribute -> batch`` tail whose dealing :func:`_rank_bounds` repeats.
_DISTRIBUTE_FIELDS = {"global_batch_size", "rank", "world_size", "remainder"}
_BATCH_FIELDS = {"batch_size", "remainder"}


def steps_of(cfg: PlanConfig, steps: tuple[int, int] | str | None) -> tuple[int, int]:
    """The step range ``[a, b)`` to scan: ``steps`` (``(a, b)`` or ``"A:B"``), or the whole
    stream when it is finite (a ConfigError for an endless one: give a range)."""
    if steps is None:
        opts = cfg.options
        if opts.num_epochs is None and opts.repeat:
            raise ConfigError(
                "the stream repeats forever (num_epochs is not set): give the steps to scan, "
                "e.g. --steps 0:100000"
            )
        return 0, 1 << 62
    if isinstance(steps, str):
        from fpipe.plan.skip import parse_step_range

        steps = parse_step_range(steps)
    a, b = int(steps[0]), int(steps[1])
    if a < 0 or b < a:
        raise ConfigError(f"a step range A:B needs 0 <= A <= B, got {a}:{b}")
    return a, b


def _items(refs: Refs) -> tuple[int, np.ndarray | None]:
    """(items of a recipe, its pack column): items are refs, or packs after a pack step."""
    pack = refs.columns.get("pack")
    if pack is None:
        return len(refs), None
    return (int(pack[-1]) + 1 if len(pack) else 0), pack


def _rank_bounds(refs: Refs, per_rank: int, world: int) -> np.ndarray:
    """Offsets of each rank's refs in one global batch, as ``distribute`` deals them: slices of
    ``per_rank`` items, or a short final batch split as evenly as possible."""
    n, pack = _items(refs)
    if n == per_rank * world:
        bounds = np.arange(world + 1, dtype=np.int64) * per_rank
    else:
        bounds = np.linspace(0, n, world + 1).round().astype(np.int64)
    return bounds if pack is None else np.searchsorted(pack, bounds, side="left")


def _global_plan(cfg: PlanConfig, first: Any):
    """The world-size-1 plan of the whole global batch with the same global order as the ranks'
    plans, or None when that cannot be shown from the configuration."""
    opts, world = cfg.options, cfg.world_size
    if (
        world == 1
        or first.distribution != "global"
        or first.buckets is not None
        or first.packing_buffer_size is not None
    ):
        return None
    parts = first.plan.parts
    tail = [type(c) for _, c in parts[-2:]]
    if tail != [DistributeConfig, BatchConfig]:
        return None
    if (
        set(DistributeConfig.__struct_fields__) != _DISTRIBUTE_FIELDS
        or set(BatchConfig.__struct_fields__) != _BATCH_FIELDS
    ):
        return None  # the tail deals refs in a way _rank_bounds does not know
    per_rank = first.batch_size
    options = msgspec.structs.replace(opts, batch_size=per_rank * world, global_batch_size=None)
    whole = build_dataset(msgspec.structs.replace(cfg, world_size=1, options=options), 0)
    if whole.plan.fingerprint != first.plan.fingerprint:
        return None
    return whole.plan


def advance_steps(plan, state, steps: int):
    """``(state after steps outputs, whether they all exist)``: on counts where the plan can
    (:meth:`fpipe.core.Pipeline.advance` reaches the state ``next`` reaches; a step far into
    a run costs what a loader's seek does), else output by output."""
    if hasattr(plan, "advance"):
        state, passed = plan.advance(state, steps)
        return state, passed.outputs == steps
    for _ in range(steps):
        state, out = plan.next(state, 1)
        if not len(out):
            return state, False
    return state, True


def scan_steps(
    cfg: PlanConfig, a: int, b: int, first: Any = None
) -> Iterator[tuple[int, Refs, np.ndarray]]:
    """``(step, refs of every rank, rank offsets)`` for the steps ``[a, b)`` that exist: rank r's
    refs of the step are ``refs[offsets[r]:offsets[r + 1]]`` (empty past the end of its
    stream), in the order the loader delivers them. ``first``: rank 0's dataset, if built."""
    first = build_dataset(cfg, 0) if first is None else first
    world = cfg.world_size
    whole = _global_plan(cfg, first)
    if whole is not None:
        state, ok = advance_steps(whole, whole.init(), a)
        nxt, per_rank = whole.next, first.batch_size
        for step in range(a, b if ok else a):
            state, out = nxt(state, 1)
            if not len(out):
                return
            refs = out[0].refs
            yield step, refs, _rank_bounds(refs, per_rank, world)
        return
    plans = [first.plan] + [build_dataset(cfg, r).plan for r in range(1, world)]
    states: list[Any] = []
    for p in plans:
        s, ok = advance_steps(p, p.init(), a)
        states.append(s if ok else None)
    for step in range(a, b):
        chunks = []
        for r, p in enumerate(plans):
            if states[r] is not None:
                states[r], out = p.next(states[r], 1)
                if len(out):
                    chunks.append(out[0].refs)
                    continue
                states[r] = None
            chunks.append(Refs.empty())
        if all(s is None for s in states):
            return
        sizes = np.array([0] + [len(c) for c in chunks], dtype=np.int64)
        yield step, Refs.concat(chunks), np.cumsum(sizes)


def _targets(first, key: str, dataset: str | None) -> list[tuple[int, int]]:
    """(dataset id, sample index) of every dataset of the plan holding ``key``."""
    from fpipe.storage import open_dataset

    names, sources = first.datasets, first.materializer.sources
    if dataset is not None and dataset not in names:
        raise ConfigError(f"no dataset {dataset!r} in the plan; its datasets: {list(names)}")
    out, opened = [], {}
    for d, src in enumerate(sources):
        if dataset is not None and names[d] != dataset:
            continue
        where = (src.path, tuple(sorted((src.open_kwargs or {}).items())))
        if where not in opened:
            opened[where] = open_dataset(src.path, **(src.open_kwargs or {}))
        i = opened[where].index_of_key(key)
        if i is not None:
            out.append((d, int(i)))
    if not out:
        example = next((ds.key(0) for ds in opened.values() if len(ds)), None)
        hint = f" (keys look like {example!r})" if example is not None else ""
        raise ConfigError(f"no sample with key {key!r} in the plan's datasets {list(names)}{hint}")
    return out


def find_key(
    cfg: PlanConfig,
    key: str,
    steps: tuple[int, int] | str | None = None,
    *,
    dataset: str | None = None,
) -> dict[str, Any]:
    """Every place the sample ``key`` is delivered in steps ``steps`` (``(a, b)`` or
    ``"A:B"``; default: the whole stream, when it is finite).

    Returns ``{"key", "samples": [{"dataset", "index"}], "steps": [a, b], "world_size",
    "scanned_steps", "scanned_refs", "hits": [{"step", "rank", "position", "epoch", "index",
    "dataset", "skipped"}...]}``: ``position`` is the sample's place in the rank's batch (as
    ``fpipe plan --step`` lists it), ``skipped`` whether the step is in ``skip_steps``.
    ``dataset`` limits the search to one dataset of a blend. A ConfigError if no dataset of
    the plan has the key.
    """
    first = build_dataset(cfg, 0)
    a, b = steps_of(cfg, steps)
    targets = _targets(first, key, dataset)
    skip = normalize_step_ranges(cfg.options.skip_steps)
    names = first.datasets
    hits: list[dict[str, Any]] = []
    scanned, last = 0, a
    for step, refs, bounds in scan_steps(cfg, a, b, first):
        scanned += len(refs)
        last = step + 1
        index = refs.columns["index"]
        found = None
        for d, i in targets:
            m = index == i
            if m.any():
                m &= refs.columns["dataset"] == d
                found = m if found is None else found | m
        if found is None or not found.any():
            continue
        for p in np.flatnonzero(found):
            r = int(np.searchsorted(bounds, p, side="right")) - 1
            hits.append(
                {
                    "step": step,
                    "rank": r,
                    "position": int(p - bounds[r]),
                    "epoch": int(refs.columns["epoch"][p]),
                    "index": int(index[p]),
                    "dataset": names[int(refs.columns["dataset"][p])],
                    "skipped": skip_end(step, skip) is not None,
                }
            )
    return {
        "key": key,
        "samples": [{"dataset": names[d], "index": i} for d, i in targets],
        "steps": [a, last if b == 1 << 62 else b],
        "world_size": cfg.world_size,
        "scanned_steps": last - a,
        "scanned_refs": scanned,
        "hits": hits,
    }


def step_samples(cfg: PlanConfig, steps: tuple[int, int] | str) -> Iterator[dict[str, Any]]:
    """Every sample of steps ``steps`` on every rank, in delivery order: ``{"step", "rank",
    "position", "key", "index", "epoch", "dataset"}`` (``"skipped": true`` in a skip range;
    ``"pieces"``: for GPT sequences of a corpus, the ``[sequence, offset, length]`` of each
    document piece the sample was cut from)."""
    from fpipe.storage import open_dataset

    first = build_dataset(cfg, 0)
    a, b = steps_of(cfg, steps)
    skip = normalize_step_ranges(cfg.options.skip_steps)
    names, sources = first.datasets, first.materializer.sources
    opened: dict[int, Any] = {}
    for step, refs, bounds in scan_steps(cfg, a, b, first):
        skipped = skip_end(step, skip) is not None
        cols = refs.columns
        for r in range(len(bounds) - 1):
            lo = int(bounds[r])
            for p in range(lo, int(bounds[r + 1])):
                d, i = int(cols["dataset"][p]), int(cols["index"][p])
                if d not in opened:
                    opened[d] = open_dataset(sources[d].path, **(sources[d].open_kwargs or {}))
                row = {
                    "step": step,
                    "rank": r,
                    "position": p - lo,
                    "key": opened[d].key(i),
                    "index": i,
                    "epoch": int(cols["epoch"][p]),
                    "dataset": names[d],
                }
                pieces = getattr(opened[d].reader, "pieces", None)
                if pieces is not None:  # GPT sequences: the documents and tokens it was cut from
                    row["pieces"] = [list(p) for p in pieces(i)]
                if skipped:
                    row["skipped"] = True
                yield row
